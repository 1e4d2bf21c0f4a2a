// The README's library example, compiled and run by the tests so it stays true.
// Usage: example W.safetensors
#include <ffn/ffn.hpp>

#include <cstdio>
#include <vector>

int main(int argc, char** argv) try {
  if (argc != 3) {
    std::fprintf(stderr, "usage: example W.safetensors GRADS.safetensors\n");
    return 2;
  }
  // --- as in README.md ---
  ffn::FeedForward layer = ffn::FeedForward::load(argv[1]);
  const int64_t d = layer.config().d_model;
  std::vector<float> x(64 * d, 0.5f), y(x.size()), dy(x.size(), 1.0f), dx(x.size());
  ffn::Shape shape = ffn::Shape::tokens(64);
  layer.forward(x.data(), y.data(), shape);

  ffn::ForwardCache cache;
  ffn::RunOptions train{.training = true, .seed = 42};
  layer.forward(x.data(), y.data(), shape, train, &cache);
  ffn::Weights grads;
  layer.backward(x.data(), dy.data(), shape, cache, dx.data(), grads, train);
  layer.save_gradients(argv[2], grads);
  // ---
  std::printf("y[0] = %g, dx[0] = %g, |dW1| = %zu\n", y[0], dx[0], grads.w1.size());
  return 0;
} catch (const ffn::Error& e) {
  std::fprintf(stderr, "example: %s\n", e.what());
  return 2;
}
