// The single-header edition holds every part of ckpt in ckpt.hpp; this header exists so
// that code written against the multi-header tree (#include <ckpt/storage/memory.hpp>) compiles too.
#pragma once
#include "../ckpt.hpp"
