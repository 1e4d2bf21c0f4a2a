// Chat (include/ffn/chat.hpp, CausalLM::chat_prompt): the model's template
// rendered by src/text/jinja.cpp, the streamed text of a reply cut at stop
// strings, and conversations that keep their cache between turns.
#include "ffn/chat.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "ffn/causal_lm.hpp"
#include "text/specials.hpp"

namespace ffn {

namespace {

// The special token's text for an id, or nothing (no tokenizer, no such id).
std::optional<std::string> token_text(const Tokenizer* tok, int64_t id) {
  if (!tok || id < 0 || id >= tok->vocab_size()) return std::nullopt;
  return tok->token(int32_t(id));
}

// Invalid UTF-8 (a reply cut inside a character, a random model's bytes)
// with U+FFFD for each bad byte, so the conversation stays text.
std::string valid_text(const std::string& s) {
  if (text::valid_utf8(s)) return s;
  std::string out;
  for (size_t at = 0; at < s.size();) {
    size_t len = 1;
    const auto c = uint8_t(s[at]);
    const size_t need = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (need && at + need <= s.size() && text::valid_utf8(s.substr(at, need))) len = need;
    else len = 0;
    if (len) { out.append(s, at, len); at += len; }
    else { out += "\xEF\xBF\xBD"; ++at; }
  }
  return out;
}

}  // namespace

std::vector<int32_t> CausalLM::encode_prompt(const std::string& text) const {
  if (!tok_) throw Error("the model has no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json); give token ids");
  std::vector<int32_t> ids;
  if (cfg_.add_bos && cfg_.bos >= 0) ids.push_back(int32_t(cfg_.bos));
  const std::vector<int32_t> t = tok_->encode(text);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

std::string CausalLM::chat_prompt_json(const std::string& messages_json, ChatRenderOptions opts) const {
  if (!opts.chat_template && chat_template_.empty())
    throw Error(path_ + ": the model has no chat template (give the prompt as text, or a template of your own)");
  if (!opts.bos_token) opts.bos_token = bos_text_ ? *bos_text_ : token_text(tok_.get(), cfg_.bos);
  if (!opts.eos_token) opts.eos_token = eos_text_ ? *eos_text_ : token_text(tok_.get(), cfg_.eos);
  const std::string messages = check_chat_messages(messages_json);
  const ChatTemplate t = opts.chat_template ? ChatTemplate(*opts.chat_template, opts.chat_template_name)
                                            : ChatTemplate(chat_template_, path_ + ": chat template");
  return t.render_json(messages, opts);
}

std::string CausalLM::chat_prompt(const std::vector<ChatMessage>& messages, ChatRenderOptions opts) const {
  for (const auto& m : messages)
    if (!text::valid_utf8(m.role) || !text::valid_utf8(m.content))
      throw Error(path_ + ": a chat message is not valid UTF-8");
  return chat_prompt_json(chat_messages_json(messages), std::move(opts));
}

std::string CausalLM::chat_prompt(const std::string& user_message) const {
  return chat_prompt(std::vector<ChatMessage>{{"user", user_message}});
}

// ---------------------------------------------------------------- TextStream

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stop) : tok_(tok), stop_(std::move(stop)) {
  for (const auto& s : stop_)
    if (s.empty()) throw Error("--stop: a stop string must not be empty");
}

std::string TextStream::push(int32_t id) {
  if (stopped_ || id < 0 || id >= tok_.vocab_size()) return {};
  // What the whole continuation decodes to, less what was decoded before.
  ids_.push_back(id);
  std::string all = tok_.decode(ids_, true);
  text_ += all.compare(0, shown_.size(), shown_) == 0 ? all.substr(shown_.size()) : tok_.decode({id}, true);
  shown_ = std::move(all);
  // The first stop string to appear, searched where new text could complete one.
  size_t longest = 0;
  for (const auto& s : stop_) longest = std::max(longest, s.size());
  const size_t from = given_ > longest ? given_ - longest : 0;
  size_t cut = std::string::npos;
  for (const auto& s : stop_) cut = std::min(cut, text_.find(s, from));
  if (cut != std::string::npos) {
    stopped_ = true;
    text_.resize(std::max(cut, given_));
    std::string out = text_.substr(given_);
    given_ = text_.size();
    return out;
  }
  // Held back: a tail that is the start of a stop string, an incomplete UTF-8 character.
  size_t end = text_.size();
  for (const auto& s : stop_)
    for (size_t k = std::min(s.size() - 1, text_.size() - given_); k > 0; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) { end = std::min(end, text_.size() - k); break; }
  for (size_t k = 1; k <= 3 && k <= end - given_; ++k) {
    const auto c = uint8_t(text_[end - k]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > k) end -= k;
    break;
  }
  std::string out = text_.substr(given_, end - given_);
  given_ = end;
  return out;
}

std::string TextStream::finish() {
  std::string out = text_.substr(given_);
  given_ = text_.size();
  return out;
}

// ---------------------------------------------------------------- ChatSession

ChatSession::ChatSession(const CausalLM& lm, ChatOptions opts) : lm_(lm), opts_(std::move(opts)) {
  if (!lm_.tokenizer()) throw Error("chat: the model has no tokenizer");
  if (lm_.chat_template().empty() && !opts_.render.chat_template) throw Error("chat: the model has no chat template");
  const int64_t model = lm_.config().context;
  if (opts_.context < 0) throw Error("--context: expected a positive number of positions, got " + std::to_string(opts_.context));
  if (model > 0 && opts_.context > model)
    throw Error("--context: " + std::to_string(opts_.context) + " is past the model's context of " + std::to_string(model));
  capacity_ = opts_.context > 0 ? opts_.context : model > 0 ? std::min<int64_t>(model, 4096) : 4096;
  for (const auto& s : opts_.stop)
    if (s.empty()) throw Error("--stop: a stop string must not be empty");
  if (!opts_.system.empty()) messages_.push_back({"system", opts_.system});
  state_ = lm_.start(0, capacity_);  // pages come as the conversation grows
  state_.join();
}

std::vector<int32_t> ChatSession::render(const std::vector<ChatMessage>& messages) const {
  return lm_.tokenizer()->encode(lm_.chat_prompt(messages, opts_.render));
}

ChatReply ChatSession::say(const std::string& user, const SamplingOptions& asked,
                           const std::function<bool(const std::string&)>& on_text, const RunOptions& run,
                           const std::function<bool(int32_t)>& on_token_id) {
  asked.validate();
  std::vector<ChatMessage> next = messages_;
  next.push_back({"user", user});
  std::vector<int32_t> prompt = render(next);
  // With context_shift, the oldest turns after the leading system messages
  // go (a user message and the replies up to the next user message) until
  // the prompt leaves room for the reply: max_new_tokens, or half the
  // context if that is less (a reply past it is cut, as without the shift).
  int64_t dropped = 0;
  if (opts_.context_shift) {
    const int64_t room = std::max<int64_t>(1, std::min<int64_t>(asked.max_new_tokens, capacity_ / 2));
    size_t first = 0;
    while (first < next.size() && next[first].role == "system") ++first;
    while (int64_t(prompt.size()) + room > capacity_ && first + 1 < next.size()) {
      size_t end = first + 1;
      while (end + 1 < next.size() && next[end].role != "user") ++end;
      dropped += int64_t(end - first);
      next.erase(next.begin() + std::ptrdiff_t(first), next.begin() + std::ptrdiff_t(end));
      prompt = render(next);
    }
  }
  const int64_t n = int64_t(prompt.size());
  if (n >= capacity_)
    throw Error("chat: the conversation is " + std::to_string(n) + " tokens, " +
                (n > capacity_ ? std::to_string(n - capacity_) + " past" : "all of") + " the context of " +
                std::to_string(capacity_) +
                (opts_.context_shift ? " with only the last message (--context)"
                                     : " (--context-shift drops the oldest turns; --context raises the limit)"));
  // The reply gets what was asked, cut at the context ("length").
  SamplingOptions s = asked;
  s.max_new_tokens = std::min<int64_t>(asked.max_new_tokens, capacity_ - n);
  // Keep the longest common prefix, at least one token short of the prompt.
  size_t keep = 0;
  while (keep < cached_.size() && keep < prompt.size() && cached_[keep] == prompt[keep]) ++keep;
  keep = std::min(keep, prompt.size() - 1);
  state_.truncate(0, int64_t(keep));
  cached_.resize(keep);

  ChatReply r;
  r.prompt_tokens = n;
  r.reused_tokens = int64_t(keep);
  r.dropped_messages = dropped;
  TextStream stream(*lm_.tokenizer(), opts_.stop);
  bool go_on = true, interrupted = false;
  auto on_token = [&](int32_t id) {
    if (on_token_id && !on_token_id(id)) return !(interrupted = true);
    const std::string piece = stream.push(id);
    if (on_text && !piece.empty()) go_on = on_text(piece);
    if (!go_on) interrupted = true;
    return go_on && !stream.stopped();
  };
  try {
    r.ids = lm_.generate(state_, prompt, s, on_token, run);
  } catch (...) {
    // The cache may hold part of this turn: keep what is known to be there.
    state_.truncate(0, std::min<int64_t>(state_.length(0), int64_t(keep)));
    throw;
  }
  const std::string rest = stream.finish();
  if (on_text && !rest.empty() && go_on) on_text(rest);
  r.text = stream.text();
  r.stopped_by_string = stream.stopped();
  const auto& ends = lm_.config().end_ids;
  const bool ended = !r.ids.empty() && (r.ids.back() == lm_.config().eos ||
                                        std::find(ends.begin(), ends.end(), r.ids.back()) != ends.end());
  r.finish_reason = r.stopped_by_string || ended ? "stop" : interrupted ? "interrupted" : "length";
  // The cache now holds the prompt and the reply's tokens but the last.
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), r.ids.begin(), r.ids.end());
  all.resize(size_t(std::min<int64_t>(state_.length(0), int64_t(all.size()))));
  state_.truncate(0, int64_t(all.size()));
  cached_ = std::move(all);
  messages_ = std::move(next);
  messages_.push_back({"assistant", valid_text(r.text)});
  return r;
}

}  // namespace ffn
