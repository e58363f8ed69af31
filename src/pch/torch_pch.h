// Precompiled once, reused by every target that includes torch (see PipetrainCompiler.cmake).
#pragma once
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>
