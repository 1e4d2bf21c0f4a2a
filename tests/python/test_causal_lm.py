"""ffn.CausalLM on the quantized GGUF of scripts/make_llama_gguf_golden.py
(tests/data/gguf/llama_q.*) against what transformers made of it, and its
errors (a random Hugging Face directory of scripts/make_llama_golden.py for
the missing chat template); the same code as ffn generate, whose Hugging Face
paths tests/models/test_causal_lm.cpp covers."""
import json
import os

import numpy as np
import pytest

import ffn

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")
GGUF = os.path.join(DATA, "gguf", "llama_q.gguf")
CASES = json.load(open(os.path.join(DATA, "gguf", "llama_q.json"), encoding="utf-8"))


def test_fp32_logits_and_greedy_match_transformers():
    lm = ffn.CausalLM.load(GGUF, compute="fp32")
    assert not lm.quantized and lm.config["kv_heads"] == 2
    for k, ids in enumerate(CASES["prompts"]):
        got, want = lm.logits(ids), np.array(CASES["logits"][k], dtype=np.float32)
        assert got.shape == want.shape
        assert (np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)).max() <= 2e-3
        assert lm.generate(ids, max_new_tokens=12) == CASES["greedy"][k]


def test_native_generate_text_tokens_and_streaming():
    lm = ffn.CausalLM.load(GGUF)
    assert lm.quantized
    for t, ids in zip(CASES["texts"], CASES["text_ids"]):
        assert lm.tokenize(t) == ids
        assert lm.decode(ids) == t.replace("<|im_start|>", "").replace("<|im_end|>", "")
    assert lm.tokenize(lm.chat_prompt("hi there")) == CASES["chat_ids"]
    seen = []
    out = lm.generate(CASES["prompts"][2], max_new_tokens=12, on_token=seen.append)
    assert out == CASES["greedy"][2] and seen == out
    first3 = []
    out = lm.generate(CASES["prompts"][2], max_new_tokens=12, on_token=lambda i: first3.append(i) or len(first3) < 3)
    assert out == CASES["greedy"][2][:3] == first3
    text = lm.generate("The feed-forward network", max_new_tokens=5)
    assert isinstance(text, str)
    a = lm.generate(CASES["prompts"][1], temperature=1.0, seed=3, max_new_tokens=20)
    assert a == lm.generate(CASES["prompts"][1], temperature=1.0, seed=3, max_new_tokens=20)


def test_bad_input_raises_ffn_error():
    lm = ffn.CausalLM.load(GGUF)
    with pytest.raises(ffn.Error, match="outside the vocabulary"):
        lm.logits([0, 10**6])
    with pytest.raises(ffn.Error, match="^top_p: expected"):
        lm.generate([1, 2], top_p=0.0)
    with pytest.raises(ffn.Error, match="^max_new_tokens: expected 0 or more, got -1"):
        lm.generate("hi", max_new_tokens=-1)
    with pytest.raises(ffn.Error, match="^stop: a stop string must not be empty"):
        lm.generate("hi", stop=[""])
    with pytest.raises(ffn.Error, match="^context: expected a positive number"):
        lm.chat(context=-1)
    with pytest.raises(ffn.Error, match="new tokens is past the model's context") as e:
        lm.generate([1, 2], max_new_tokens=10**6)
    assert "--" not in str(e.value), e.value
    with pytest.raises(ffn.Error, match="compute"):
        ffn.CausalLM.load(GGUF, compute="int3")
    with pytest.raises(ffn.Error, match="no chat template"):
        ffn.CausalLM.load(os.path.join(DATA, "llama", "mha_odd")).chat_prompt("hi")
    with pytest.raises(ffn.Error, match="nothing-here"):
        ffn.CausalLM.load(os.path.join(DATA, "nothing-here"))


def test_chat_conversations_in_the_models_template():
    lm = ffn.CausalLM.load(GGUF)
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"}, {"role": "user", "content": "café?"}]
    prompt = lm.chat_prompt(msgs)
    assert lm.chat_prompt("hi") == lm.chat_prompt([{"role": "user", "content": "hi"}])
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:
        print("SKIPPED: transformers' template compiler is not importable; chat_prompt checked against itself only")
    else:
        want = _compile_jinja_template(lm.chat_template).render(
            messages=msgs, tools=None, documents=None, add_generation_prompt=True,
            bos_token=lm.decode([lm.config["bos"]], skip_special=False),
            eos_token=lm.decode([lm.config["eos"]], skip_special=False))
        assert prompt == want
    # generate(messages, chat=True) is the template's prompt, generated.
    ids = lm.tokenize(prompt)
    want_ids = lm.generate(ids, max_new_tokens=8)
    text = lm.generate(msgs, chat=True, max_new_tokens=8)
    assert text == lm.decode([i for i in want_ids if i < lm.config["vocab"]])
    # A stop string ends the text before it (an ASCII one: a random model's text is mostly stray bytes).
    stops = [c for c in text[1:] if c.isascii() and c.isalnum()]
    assert stops, text
    assert lm.generate(msgs, chat=True, max_new_tokens=8, stop=[stops[0]]) == text[:text.index(stops[0])]
    with pytest.raises(ffn.Error, match="stop strings end text"):
        lm.generate([1, 2], stop=["x"])
    with pytest.raises(TypeError, match="messages: expected a list of"):
        lm.chat_prompt(42)
    assert lm.chat_prompt(msgs, template_vars={"unused": True}) == prompt
    with pytest.raises(ffn.Error, match="template_vars"):
        lm.chat_prompt(msgs, template_vars=[1])
    with pytest.raises(ffn.Error, match="template_vars: only with chat=True"):
        lm.generate("hi", template_vars={"a": 1})


def test_chat_session_keeps_its_cache_between_turns():
    lm = ffn.CausalLM.load(GGUF)
    chat = lm.chat(system="Be brief.")
    history = [{"role": "system", "content": "Be brief."}]
    last_prompt = 0
    for turn in ["hello there", "two plus two?"]:
        pieces = []
        r = chat.say(turn, max_new_tokens=6, on_text=pieces.append)
        history.append({"role": "user", "content": turn})
        assert r["ids"] == lm.generate(lm.tokenize(lm.chat_prompt(history)), max_new_tokens=6)
        assert "".join(pieces) == r["text"]
        assert r["reused_tokens"] >= last_prompt and r["reused_tokens"] < r["prompt_tokens"]
        last_prompt = r["prompt_tokens"]
        history.append(chat.messages[-1])
    assert chat.messages == history
    with pytest.raises(ffn.Error, match="past the context"):
        chat.say("x " * 400)
    assert chat.messages == history


def test_generate_takes_messages_and_refuses_other_types_in_pythons_terms():
    """Issue 62: a list of messages chats without chat=True; an int, bytes, a
    list of neither ints nor dicts, a lone surrogate get TypeError/ValueError
    naming the argument (was RuntimeError: std::bad_cast)."""
    lm = ffn.CausalLM.load(GGUF)
    msgs = [{"role": "user", "content": "hi"}]
    assert lm.generate(msgs, max_new_tokens=6) == lm.generate(msgs, chat=True, max_new_tokens=6)
    for bad in (42, b"hi", [1.5, 2], {"role": "user"}):
        with pytest.raises(TypeError, match="^prompt: expected str"):
            lm.generate(bad)
    with pytest.raises(ValueError, match="^prompt: the text has no UTF-8 form"):
        lm.generate("a\ud800b")
    with pytest.raises(ValueError, match="no UTF-8 form"):
        lm.chat_prompt([{"role": "user", "content": "\udc00"}])
    with pytest.raises(TypeError, match="^message: expected str"):
        lm.chat().say(b"hi")
    with pytest.raises(ffn.Error, match=r"^prompt\[0\]\.content: required"):
        lm.generate([{"role": "user"}])
    with pytest.raises(ffn.Error, match="^prompt: the list is empty"):
        lm.generate([], chat=True)
    # Token ids as numpy integers or an integer array; one past int32 is a ValueError naming prompt.
    assert lm.generate(np.array([1, 2, 3]), max_new_tokens=4) == lm.generate([1, 2, 3], max_new_tokens=4)
    assert lm.generate([np.int64(1), 2, 3], max_new_tokens=4) == lm.generate([1, 2, 3], max_new_tokens=4)
    with pytest.raises(ValueError, match=r"^prompt: token id 2147483648 is not in 0\.\.2147483647"):
        lm.generate([2**31])
    with pytest.raises(ffn.Error, match=r"messages\[1\]\.role: expected system, developer, user, assistant or tool"):
        lm.chat_prompt([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])
    with pytest.raises(ffn.Error, match="messages: the list is empty"):
        lm.chat_prompt([])
    # A list of text parts reaches the template as the list, as transformers passes it (ffn serve joins them).
    parts = [{"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}]
    looping = "{% for m in messages %}{% for p in m.content %}<{{ p.text }}>{% endfor %}{% endfor %}"
    assert lm.chat_prompt(parts, template=looping) == "<h><i>"
    with pytest.raises(ffn.Error, match=r"messages\[0\]\.content\[0\]: expected"):
        lm.chat_prompt([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])


def test_chat_prompt_with_another_template_and_chats_at_the_context():
    lm = ffn.CausalLM.load(GGUF)
    tpl = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}"
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    assert lm.chat_prompt(msgs, template=tpl) == "[system] S\n[user] hi\n[assistant]"
    want_ids = lm.generate(lm.tokenize("[system] S\n[user] hi\n[assistant]"), max_new_tokens=5)
    assert lm.generate(msgs, template=tpl, max_new_tokens=5) == lm.decode([i for i in want_ids if i < lm.config["vocab"]])
    with pytest.raises(ffn.Error, match="template: line 1"):
        lm.chat_prompt(msgs, template="{% if %}")
    chat = lm.chat(template=tpl)
    r = chat.say("hi", max_new_tokens=4)
    assert r["prompt_tokens"] == len(lm.tokenize("[user] hi\n[assistant]"))
    assert r["finish_reason"] in ("stop", "length") and r["dropped_messages"] == 0
    # The reply is cut at the context and says so, where it used to refuse the turn.
    n = len(lm.tokenize(lm.chat_prompt("hello")))
    short = lm.chat(context=n + 3)
    r = short.say("hello", max_new_tokens=50)
    assert len(r["ids"]) <= 3 and (r["finish_reason"] == "length" or r["ids"][-1] in lm.config["end_ids"])
    # context_shift drops the oldest turns and reports them.
    shifting = lm.chat(system="S", context=n + 24, context_shift=True)
    dropped = 0
    for turn in ["hello", "and again", "once more", "last one"]:
        r = shifting.say(turn, max_new_tokens=8)
        dropped += r["dropped_messages"]
    assert dropped > 0 and shifting.messages[0] == {"role": "system", "content": "S"}
