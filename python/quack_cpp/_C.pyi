# Type stubs for the nanobind extension (python/src/ext.cpp).

def version() -> str: ...
def rmsnorm_fwd(
    rows: int, cols: int,
    x_ptr: int, x_dtype: int, x_stride: int,
    res_ptr: int, res_dtype: int, res_stride: int,
    w_ptr: int, w_dtype: int,
    b_ptr: int, b_dtype: int,
    out_ptr: int, out_dtype: int, out_stride: int,
    res_out_ptr: int, res_out_dtype: int, res_out_stride: int,
    rstd_ptr: int, eps: float, weight_offset: float, stream: int,
) -> None: ...
def rmsnorm_fwd_check(
    rows: int, cols: int,
    x_ptr: int, x_dtype: int, x_stride: int,
    res_ptr: int, res_dtype: int, res_stride: int,
    w_ptr: int, w_dtype: int,
    b_ptr: int, b_dtype: int,
    out_ptr: int, out_dtype: int, out_stride: int,
    res_out_ptr: int, res_out_dtype: int, res_out_stride: int,
    rstd_ptr: int, eps: float, weight_offset: float, stream: int,
) -> None: ...
def softmax_fwd(
    rows: int, cols: int, x_ptr: int, dtype: int, x_stride: int, out_ptr: int, out_stride: int,
    log: bool, stream: int,
) -> None: ...
def softmax_bwd(
    rows: int, cols: int, y_ptr: int, dtype: int, y_stride: int, dy_ptr: int, dy_stride: int,
    dx_ptr: int, dx_stride: int, log: bool, stream: int,
) -> None: ...
