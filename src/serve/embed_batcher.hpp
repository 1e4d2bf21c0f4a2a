// The embedding requests of every connection, batched (ffn serve's /v1/embeddings).
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ffn/sentence.hpp"

namespace ffn::serve {

// Embedding requests of every connection batched together: the worker takes
// all that wait and runs them as one list (batches of 32 texts, whose
// padding changes no result: the same bits as `ffn embed`).
class EmbedBatcher {
 public:
  struct Item {
    std::vector<std::string> texts;
    std::vector<std::vector<int32_t>> ids;
    std::promise<Array> done;
  };
  EmbedBatcher(const SentenceEncoder& enc, int threads, Isa isa)
      : enc_(enc), threads_(threads), isa_(isa), thread_([this] { loop(); }) {}
  ~EmbedBatcher() {
    {
      const std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::future<Array> submit(std::vector<std::string> texts, std::vector<std::vector<int32_t>> ids) {
    auto it = std::make_unique<Item>();
    it->texts = std::move(texts);
    it->ids = std::move(ids);
    std::future<Array> f = it->done.get_future();
    {
      const std::lock_guard<std::mutex> l(m_);
      q_.push_back(std::move(it));
    }
    cv_.notify_all();
    return f;
  }

 private:
  void run(std::vector<std::unique_ptr<Item>>& items) {
    EmbedOptions eo;
    eo.threads = threads_;
    eo.isa = isa_;
    eo.prompt = "";  // the handler puts each request's prompt before its texts
    std::vector<std::string> texts;
    std::vector<std::vector<int32_t>> ids;
    for (auto& it : items) {
      texts.insert(texts.end(), it->texts.begin(), it->texts.end());
      ids.insert(ids.end(), it->ids.begin(), it->ids.end());
    }
    Array t = texts.empty() ? Array{} : enc_.embed(texts, eo);
    Array i = ids.empty() ? Array{} : enc_.embed_ids(ids, eo);
    const int64_t d = enc_.dim();
    size_t at_t = 0, at_i = 0;
    for (auto& it : items) {
      Array out;
      const size_t n = it->texts.size() + it->ids.size();
      out.shape = {int64_t(n), d};
      const Array& src = it->texts.empty() ? i : t;
      size_t& at = it->texts.empty() ? at_i : at_t;
      out.data.assign(src.data.begin() + std::ptrdiff_t(at * size_t(d)), src.data.begin() + std::ptrdiff_t((at + n) * size_t(d)));
      at += n;
      it->done.set_value(std::move(out));
    }
  }
  void loop() {
    for (;;) {
      std::vector<std::unique_ptr<Item>> items;
      {
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (stop_ && q_.empty()) return;
        size_t inputs = 0;
        while (!q_.empty() && (items.empty() || inputs + q_.front()->texts.size() + q_.front()->ids.size() <= 256)) {
          inputs += q_.front()->texts.size() + q_.front()->ids.size();
          items.push_back(std::move(q_.front()));
          q_.pop_front();
        }
      }
      try {
        run(items);
      } catch (...) {
        // One request's error must not fail the others: each alone.
        for (auto& it : items) {
          std::vector<std::unique_ptr<Item>> one;
          one.push_back(std::move(it));
          try {
            run(one);
          } catch (...) {
            one[0]->done.set_exception(std::current_exception());
          }
        }
      }
    }
  }
  const SentenceEncoder& enc_;
  int threads_;
  Isa isa_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Item>> q_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ffn::serve
