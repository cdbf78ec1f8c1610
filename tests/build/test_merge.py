"""When torch's main.cpp and the host half of cuda.cu compile as one translation unit: only where what the
candidate wrote into main.cpp are plain declarations the host half cannot give another meaning."""

from __future__ import annotations

import pytest

from sandbox_side.build.merge import merged_source, why_not_merged

MAIN = ('#include <torch/extension.h>\n{}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n'
        'm.def("f", torch::wrap_pybind_function(f), "f");\n}}\n')


@pytest.mark.parametrize("declarations", [
    "torch::Tensor f(torch::Tensor x, float alpha);",
    "std::vector<torch::Tensor> f(const torch::Tensor& x, int64_t n = 2);",
    "at::Tensor f(at::Tensor x, c10::optional<at::Tensor> bias); // a comment",
    "torch::Tensor f(torch::Tensor, torch::Tensor);",
])
def test_plain_declarations_merge(declarations):
    assert why_not_merged(MAIN.format(declarations), "#define BLOCK 256\n") is None


@pytest.mark.parametrize(("declarations", "why"), [
    ("torch::Tensor f(Tensor x);", "'Tensor'"),  # unqualified: a `using namespace` in the host half would fix it
    ("using namespace torch;\nTensor f(Tensor x);", "'using'"),
    ("#define SCALE 2\ntorch::Tensor f(torch::Tensor x);", "more than function declarations"),
    ("torch::Tensor f(torch::Tensor x) { return x; }", "more than function declarations"),
    ("torch::Tensor f(at::RestrictPtrTraits x);", "'RestrictPtrTraits'"),  # declared by the host half's prelude
])
def test_anything_else_keeps_the_units_apart(declarations, why):
    assert why in why_not_merged(MAIN.format(declarations), "")


def test_a_macro_of_the_cuda_source_that_main_uses_keeps_them_apart():
    main = MAIN.format("torch::Tensor f(torch::Tensor x);")
    assert "'f'" in why_not_merged(main, "#define f g\n")
    assert "'m'" in why_not_merged(main, "  #  define m module\n")


def test_the_host_half_comes_first_and_main_keeps_its_own_name_and_lines():
    text = merged_source('#line 1 "cuda.cu"\nint host();', "#include <torch/extension.h>\nint main_part();")
    assert text.index("host()") < text.index('#line 1 "main.cpp"') < text.index("main_part()")
