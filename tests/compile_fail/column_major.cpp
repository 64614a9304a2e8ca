// Column-major xtensor containers would be saved in the wrong element order.
#include <ckpt/ckpt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

struct Weights {
#ifdef CKPT_SHOULD_FAIL
  xt::xtensor<float, 2, xt::layout_type::column_major> w;
#else
  xt::xtensor<float, 2> w;
#endif
};

void f() { ckpt::save("/nonexistent/never-run", Weights{}); }

// expect: ckpt: xtensor containers must be row-major
