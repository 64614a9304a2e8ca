// ckpt/eigen.hpp — ckpt with Eigen's matrices, arrays and tensors as leaves (needs
// Eigen 3.4: CMake's ckpt::eigen, meson's and pkg-config's ckpt-eigen).
//
// Eigen::Matrix, Eigen::Array and Eigen::Map of either (leaf/eigen.hpp); Eigen::Tensor,
// Eigen::TensorFixedSize and Eigen::TensorMap (leaf/eigen_tensor.hpp). Each is stored
// as numpy would hold it: its shape, its elements in row-major order (docs/torch.md).
#pragma once

#include <ckpt/ckpt.hpp>
#include <ckpt/leaf/eigen.hpp>
#include <ckpt/leaf/eigen_tensor.hpp>
