// A field whose type ckpt cannot store: the error names the struct, the field and its type.
#include <ckpt/ckpt.hpp>

struct Model {
  float lr = 0.1f;
#ifdef CKPT_SHOULD_FAIL
  const char* label = nullptr;
#else
  std::string label;
#endif
};

void f() { (void)ckpt::restore<Model>("/nonexistent/never-run"); }

// expect: ******** ckpt: the type of a field is neither a leaf nor a struct ckpt can reflect
// expect: leave the field out with a ckpt_fields customization
// expect: Model
// expect-gcc: text<ckpt::detail::fixed_string<5>{"label"}>, const char*>
// expect-clang: text_chars<'l', 'a', 'b', 'e', 'l'>, const char *>
