// The heads' axis swap by its definition, y[a][c][b][d] = x[a][b][c][d], element by element: what
// the CUDA kernel (on a GPU) and its pack plan (on the CPU) are both held to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dlbench::worker {

template <typename T>
std::vector<T> swapped_axes(const std::vector<T>& x, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  std::vector<T> y(x.size());
  for (std::int64_t ai = 0; ai < a; ++ai)
    for (std::int64_t bi = 0; bi < b; ++bi)
      for (std::int64_t ci = 0; ci < c; ++ci)
        for (std::int64_t di = 0; di < d; ++di) {
          y[static_cast<std::size_t>(((ai * c + ci) * b + bi) * d + di)] =
              x[static_cast<std::size_t>(((ai * b + bi) * c + ci) * d + di)];
        }
  return y;
}

}  // namespace dlbench::worker
