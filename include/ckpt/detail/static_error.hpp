// ckpt/detail/static_error.hpp — the one banner every static_assert of ckpt prints.
//
//   ******** ckpt: <what went wrong> ********
//   <what to do>
//   <where the type and the field are named>
//
// A C++20 static_assert message is a string literal, so it cannot spell the type or
// the field itself; the line after the banner says where the compiler names them:
// in the CKPT_ERROR_... template the next error instantiates (it carries the type,
// the field or path as template arguments), or in the "required from" lines of the
// instantiation.
#pragma once

// what: what went wrong; todo: what to do about it; named: where the type and the
// field are named. All three are string literals.
#define CKPT_STATIC_ERROR(what, todo, named) "\n\n******** ckpt: " what " ********\n" todo "\n" named "\n"

// For the checks ckpt makes on itself (its tables, the compiler's behaviour): a user
// who sees one has found a bug in ckpt or a compiler it does not support.
#define CKPT_INTERNAL_CHECK(what)                                                                  \
  CKPT_STATIC_ERROR("internal check failed: " what,                                                \
                    "This is a bug in ckpt or a compiler it does not support: please report it, " \
                    "with the compiler and its version.",                                          \
                    "")

// The "named" line for the usual cases.
#define CKPT_NAMED_NEXT "The next error (CKPT_ERROR_...) names the type."
#define CKPT_NAMED_ABOVE "The type is named in the \"required from\" / \"in instantiation of\" lines of this error."
