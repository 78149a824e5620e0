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
def softmax_fwd_ws(
    rows: int, cols: int, x_ptr: int, dtype: int, x_stride: int, out_ptr: int, out_stride: int,
    log: bool, stream: int, ws_ptr: int, ws_bytes: int, mode: int,
) -> int: ...
SOFTMAX_FWD_WORKSPACE_MIN_COLS: int
def softmax_bwd(
    rows: int, cols: int, y_ptr: int, dtype: int, y_stride: int, dy_ptr: int, dy_stride: int,
    dx_ptr: int, dx_stride: int, log: bool, stream: int,
) -> None: ...
def softmax_bwd_ws(
    rows: int, cols: int, y_ptr: int, dtype: int, y_stride: int, dy_ptr: int, dy_stride: int,
    dx_ptr: int, dx_stride: int, log: bool, stream: int, ws_ptr: int, ws_bytes: int, mode: int,
) -> int: ...
SOFTMAX_BWD_WORKSPACE_MIN_COLS: int
def rmsnorm_bwd(
    rows: int, cols: int,
    h_ptr: int, h_dtype: int, h_stride: int,
    dy_ptr: int, dy_dtype: int, dy_stride: int,
    dro_ptr: int, dro_dtype: int, dro_stride: int,
    w_ptr: int, w_dtype: int, rstd_ptr: int,
    dx_ptr: int, dx_dtype: int, dx_stride: int,
    dres_ptr: int, dres_dtype: int, dres_stride: int,
    dw_ptr: int, dw_dtype: int, db_ptr: int, db_dtype: int,
    weight_offset: float, ws_ptr: int, ws_bytes: int, mode: int, stream: int,
) -> int: ...
def layernorm_fwd(
    rows: int, cols: int,
    x_ptr: int, x_dtype: int, x_stride: int,
    res_ptr: int, res_dtype: int, res_stride: int,
    w_ptr: int, w_dtype: int,
    b_ptr: int, b_dtype: int,
    out_ptr: int, out_dtype: int, out_stride: int,
    res_out_ptr: int, res_out_dtype: int, res_out_stride: int,
    rstd_ptr: int, eps: float, weight_offset: float, stream: int, mean_ptr: int, check_only: bool,
) -> None: ...
def norm_fwd_ws(
    centre: bool, rows: int, cols: int,
    x_ptr: int, x_dtype: int, x_stride: int,
    res_ptr: int, res_dtype: int, res_stride: int,
    w_ptr: int, w_dtype: int,
    b_ptr: int, b_dtype: int,
    out_ptr: int, out_dtype: int, out_stride: int,
    res_out_ptr: int, res_out_dtype: int, res_out_stride: int,
    rstd_ptr: int, eps: float, weight_offset: float, stream: int, mean_ptr: int,
    ws_ptr: int, ws_bytes: int, mode: int,
) -> int: ...
NORM_FWD_WORKSPACE_MIN_COLS: int
def layernorm_bwd(
    rows: int, cols: int,
    h_ptr: int, h_dtype: int, h_stride: int,
    dy_ptr: int, dy_dtype: int, dy_stride: int,
    dro_ptr: int, dro_dtype: int, dro_stride: int,
    w_ptr: int, w_dtype: int, rstd_ptr: int,
    dx_ptr: int, dx_dtype: int, dx_stride: int,
    dres_ptr: int, dres_dtype: int, dres_stride: int,
    dw_ptr: int, dw_dtype: int, db_ptr: int, db_dtype: int,
    weight_offset: float, ws_ptr: int, ws_bytes: int, mode: int, stream: int, mean_ptr: int,
) -> int: ...
def cross_entropy(
    rows: int, cols: int, logits_ptr: int, dtype: int, logits_stride: int,
    target_ptr: int, target64: bool, target_stride: int, weight_ptr: int, ignore_index: int,
    reduction: int, label_smoothing: float, z_loss: float, softcap: float,
    loss_ptr: int, lse_ptr: int, dx_ptr: int, dx_stride: int, dloss_ptr: int,
    ws_ptr: int, ws_bytes: int, mode: int, stream: int,
) -> int: ...
def cross_entropy_scale_grad(
    rows: int, cols: int, dx_ptr: int, dtype: int, dx_stride: int, dloss_ptr: int, per_row: bool, stream: int,
) -> None: ...
