"""Word lists the rules share: what honest kernels may call, and what counts as PyTorch compute."""

from __future__ import annotations

import re

# Allocation: torch.<name>(...) and tensor.<name>(...) that only create memory.
ALLOCATION_CALLS = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "new_empty", "new_zeros", "new_ones", "new_full", "new_empty_strided", "tensor",
    "zero_", "fill_",
})

# Views, reshapes, dtype/device moves and other metadata-only or layout-only operations.
VIEW_METHODS = frozenset({
    "view", "view_as", "reshape", "reshape_as", "contiguous", "permute", "transpose", "t", "flatten",
    "unflatten", "unsqueeze", "squeeze", "expand", "expand_as", "broadcast_to", "narrow", "select",
    "chunk", "split", "unbind", "tensor_split", "movedim", "moveaxis", "swapaxes", "swapdims",
    "as_strided", "view_as_real", "view_as_complex", "to", "float", "half", "bfloat16", "double", "int",
    "long", "short", "bool", "byte", "char", "type", "type_as", "cuda", "cpu", "detach", "requires_grad_",
    "pin_memory", "broadcast_tensors", "atleast_1d", "atleast_2d", "atleast_3d", "untyped_storage",
})

# Methods that return plain Python values (shapes, pointers, flags).
SCALAR_METHODS = frozenset({
    "size", "numel", "stride", "dim", "ndimension", "nelement", "element_size", "data_ptr",
    "is_contiguous", "storage_offset", "get_device", "item", "is_floating_point", "is_complex",
    "__len__", "tolist",
})

# torch.<name> that are fine to reference or call anywhere: allocation, views, dtypes, devices.
ALLOWED_TORCH_NAMES = ALLOCATION_CALLS | VIEW_METHODS | frozenset({
    "Tensor", "Size", "device", "dtype", "finfo", "iinfo", "is_tensor", "is_floating_point", "numel",
    "no_grad", "inference_mode", "enable_grad", "set_grad_enabled", "get_default_dtype", "promote_types",
    "broadcast_shapes", "float16", "float32", "float64", "bfloat16", "half", "double", "float", "int8",
    "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "long", "int", "short",
    "complex64", "complex128", "cfloat", "cdouble", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
    "float8_e5m2fnuz", "strided", "sparse_coo", "contiguous_format", "channels_last", "channels_last_3d",
    "preserve_format", "layout", "memory_format", "Generator", "version", "__version__", "nn", "cuda",
    "utils", "library", "ops", "autograd", "is_grad_enabled", "SymInt", "types",
})

# Prefixes under torch.* owned by other rules (so one behaviour gets one rule id).
NOT_COMPUTE_PREFIXES = (
    "torch.cuda", "torch.backends", "torch.utils", "torch.library", "torch.jit", "torch.compile",
    "torch._dynamo", "torch._inductor", "torch.export", "torch.fx", "torch.distributed", "torch.multiprocessing",
    "torch.hub", "torch.random", "torch.manual_seed", "torch.seed", "torch.initial_seed", "torch.get_rng_state",
    "torch.set_rng_state", "torch.set_float32_matmul_precision", "torch.set_flush_denormal",
    "torch.use_deterministic_algorithms", "torch.set_default_dtype", "torch.set_default_device",
    "torch.set_num_threads", "torch.set_default_tensor_type", "torch.overrides", "torch.autograd.Function",
    "torch.nn.Module", "torch.nn.Parameter", "torch.nn.ParameterList", "torch.nn.ParameterDict",
    "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.Buffer", "torch.nn.init", "torch.Stream",
    "torch.Event", "torch.load", "torch.save", "torch.from_file", "torch.profiler", "torch.testing",
    "torch.set_printoptions", "torch._C", "torch.Tensor._make_subclass",
)

# Tensor methods (and torch.Tensor.<name>) that compute: PyTorch doing the work.
TENSOR_COMPUTE_METHODS = frozenset({
    # arithmetic
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder",
    "fmod", "neg", "negative", "reciprocal", "pow", "float_power", "square", "sqrt", "rsqrt", "exp", "exp2",
    "expm1", "log", "log2", "log10", "log1p", "abs", "absolute", "sign", "sgn", "ceil", "floor", "round",
    "trunc", "frac", "clamp", "clip", "clamp_min", "clamp_max", "lerp", "addcmul", "addcdiv", "hypot",
    "atan2", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
    "sigmoid", "logit", "erf", "erfc", "erfinv", "relu", "relu6", "gelu", "silu", "mish", "elu", "selu",
    "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "softplus", "softsign", "threshold",
    "nan_to_num", "maximum", "minimum", "fmax", "fmin", "xlogy", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not", "logical_and", "logical_or", "logical_not", "logical_xor", "where", "masked_fill",
    "masked_scatter", "masked_select", "heaviside", "deg2rad", "rad2deg",
    # comparisons
    "eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "equal", "allclose", "isclose", "isnan", "isinf",
    "isfinite",
    # reductions and scans
    "sum", "mean", "nansum", "nanmean", "prod", "max", "min", "amax", "amin", "aminmax", "argmax", "argmin",
    "std", "var", "var_mean", "std_mean", "norm", "logsumexp", "cumsum", "cumprod", "cummax", "cummin",
    "logcumsumexp", "all", "any", "count_nonzero", "median", "nanmedian", "mode", "kthvalue", "topk", "sort",
    "argsort", "msort", "unique", "unique_consecutive", "bincount", "histc", "diff", "renorm",
    # linear algebra
    "matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "addmm", "addbmm", "baddbmm",
    "addmv", "addr", "einsum", "tensordot", "kron", "cross", "linalg", "cholesky", "inverse", "det",
    "triu", "tril", "diag", "diagonal_scatter", "trace", "matrix_power", "lu", "qr", "svd", "pinverse",
    # neural-network functional
    "softmax", "log_softmax", "softmin", "dropout", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "linear", "bilinear", "layer_norm", "group_norm", "batch_norm",
    "instance_norm", "rms_norm", "normalize", "embedding", "max_pool1d", "max_pool2d", "max_pool3d",
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_max_pool2d", "interpolate", "upsample", "pad", "cosine_similarity", "pairwise_distance",
    "cdist", "scaled_dot_product_attention", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits",
    "hinge_embedding_loss", "margin_ranking_loss", "triplet_margin_loss", "cosine_embedding_loss",
    "pixel_shuffle", "unfold", "fold", "glu", "prelu", "rrelu", "hardshrink", "softshrink", "tanhshrink",
    "logsigmoid", "one_hot",
    # data movement that materialises results
    "clone", "copy_", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "repeat",
    "repeat_interleave", "tile", "flip", "fliplr", "flipud", "roll", "rot90", "gather", "scatter",
    "scatter_add", "scatter_reduce", "index_select", "index_add", "index_copy", "index_fill", "index_put",
    "take", "take_along_dim", "put", "nonzero", "argwhere", "masked", "apply_", "map_", "numpy",
    "arange", "linspace", "logspace", "rand", "randn", "randint", "rand_like", "randn_like", "bernoulli",
    "multinomial", "normal", "uniform_", "normal_", "exponential_", "random_", "polar", "complex",
    "fft", "ifft", "rfft", "irfft", "stft", "istft", "convolution", "_convolution",
    # dunder arithmetic called by name
    "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__", "__imul__",
    "__truediv__", "__rtruediv__", "__itruediv__", "__matmul__", "__rmatmul__", "__imatmul__", "__pow__",
    "__rpow__", "__neg__", "__abs__", "__floordiv__", "__mod__", "__and__", "__or__", "__xor__",
    "__lt__", "__le__", "__gt__", "__ge__",
}) | frozenset(  # in-place variants: x.add_(y), x.relu_()
    f"{name}_" for name in (
        "add", "sub", "mul", "div", "pow", "sqrt", "rsqrt", "exp", "log", "abs", "neg", "clamp", "clamp_min",
        "clamp_max", "relu", "sigmoid", "tanh", "masked_fill", "scatter", "scatter_add", "index_add",
        "index_copy", "index_fill", "index_put", "addmm", "baddbmm", "lerp", "addcmul", "addcdiv", "reciprocal",
        "floor", "ceil", "round", "sign", "sin", "cos", "erf", "exp2", "square", "fmod", "remainder", "where",
        "tril", "triu", "copysign", "gelu", "silu",
    )
)

# Builtins that iterate over a tensor and compute with PyTorch under the hood.
COMPUTE_BUILTINS = frozenset({"sum", "max", "min", "abs", "pow", "round", "sorted", "map", "divmod"})

# Words that make printed text look like an evaluation verdict.
VERDICT_WORDS = ("speedup", "correct", "reward", "verdict", "passed", "runtime_ms", "elapsed", "status", "compiled")
VERDICT_PATTERN = re.compile(r"\b(" + "|".join(VERDICT_WORDS) + r")\b", re.IGNORECASE)
