// The `prim` dialect. Generated from base/ops.py by `python -m openprim.dialect`; do not edit.
// Load it with `mlir-opt --irdl-file=prim.irdl.mlir` or `mlir::irdl::loadDialects`.
irdl.dialect @prim {
  // a weight or constant tensor
  irdl.operation @constant {
    %a0 = irdl.any
    irdl.attributes {"value" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // y = act(conv(x, w) + bias + residual); padding = [top, left, bottom, right]
  irdl.operation @conv2d {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, filter: %t1, bias: optional %t2, residual: optional %t3)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.integer"
    %a4 = irdl.base "#builtin.string"
    %a5 = irdl.base "#builtin.string"
    %a6 = irdl.base "#builtin.string"
    %a7 = irdl.base "#builtin.dense_array"
    irdl.attributes {"strides" = %a0, "padding" = %a1, "dilations" = %a2, "groups" = %a3, "layout" = %a4, "filter_layout" = %a5, "activation" = %a6, "activation_params" = %a7}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // MobileNet's depthwise -> pointwise pair in one op (prim-select makes it where a kernel keeps the depthwise result on chip): h = dw_act(depthwise(x, dw_filter [R, S, C]) + dw_bias), y = act(h @ filter [C, K] + bias + residual); NHWC
  irdl.operation @depthwise_pointwise {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    %t4 = irdl.base "!builtin.tensor"
    %t5 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, dw_filter: %t1, dw_bias: optional %t2, filter: %t3, bias: optional %t4, residual: optional %t5)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.string"
    %a4 = irdl.base "#builtin.string"
    %a5 = irdl.base "#builtin.dense_array"
    %a6 = irdl.base "#builtin.string"
    %a7 = irdl.base "#builtin.dense_array"
    irdl.attributes {"strides" = %a0, "padding" = %a1, "dilations" = %a2, "layout" = %a3, "dw_activation" = %a4, "dw_activation_params" = %a5, "activation" = %a6, "activation_params" = %a7}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // y = act(lhs @ rhs(^T) + bias + residual); rhs is [K,N] ([N,K] with transpose_rhs = 1; [N/NT, K, NT] panels with 2, as prim-select packs constant weights) or batched like lhs
  irdl.operation @matmul {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1, bias: optional %t2, residual: optional %t3)
    %a0 = irdl.base "#builtin.integer"
    %a1 = irdl.base "#builtin.string"
    %a2 = irdl.base "#builtin.dense_array"
    irdl.attributes {"transpose_rhs" = %a0, "activation" = %a1, "activation_params" = %a2}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // a layer_norm or rms_norm over the last dim feeding a matmul, in one op (prim-select makes it where a GEMV kernel normalizes the rows as it reads them): y = act(norm(input) @ rhs [K, N] + bias + residual); rhs may be [N/NT, K, NT] panels, as prim-select packs constant weights
  irdl.operation @norm_matmul {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    %t4 = irdl.base "!builtin.tensor"
    %t5 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, scale: optional %t1, shift: optional %t2, rhs: %t3, bias: optional %t4, residual: optional %t5)
    %a0 = irdl.base "#builtin.string"
    %a1 = irdl.base "#builtin.float"
    %a2 = irdl.base "#builtin.string"
    %a3 = irdl.base "#builtin.dense_array"
    irdl.attributes {"norm" = %a0, "epsilon" = %a1, "activation" = %a2, "activation_params" = %a3}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @batch_norm {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    %t4 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, scale: %t1, shift: %t2, mean: %t3, variance: %t4)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.string"
    irdl.attributes {"epsilon" = %a0, "layout" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // h = input + residual; y = (h - mean) / sqrt(var + eps) * scale + shift over the trailing normalized_ndim dims
  irdl.operation @layer_norm {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, scale: optional %t1, shift: optional %t2, residual: optional %t3)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.integer"
    irdl.attributes {"epsilon" = %a0, "normalized_ndim" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // h = input + residual; y = h / sqrt(mean(h^2) + eps) * scale over the trailing normalized_ndim dims
  irdl.operation @rms_norm {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, scale: optional %t1, residual: optional %t2)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.integer"
    irdl.attributes {"epsilon" = %a0, "normalized_ndim" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @group_norm {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, scale: %t1, shift: %t2)
    %a0 = irdl.base "#builtin.integer"
    %a1 = irdl.base "#builtin.float"
    %a2 = irdl.base "#builtin.string"
    irdl.attributes {"groups" = %a0, "epsilon" = %a1, "layout" = %a2}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @relu {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @leaky_relu {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.float"
    irdl.attributes {"alpha" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @clamp {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.float"
    irdl.attributes {"min" = %a0, "max" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @sigmoid {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @tanh {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @gelu {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.string"
    irdl.attributes {"approximate" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @silu {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @elu {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.float"
    irdl.attributes {"alpha" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @hardsigmoid {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.float"
    irdl.attributes {"alpha" = %a0, "beta" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @hardswish {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @exp {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @log {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @sqrt {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @abs {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @erf {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @sin {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @cos {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @add {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @sub {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @mul {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @div {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @maximum {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @minimum {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @pow {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @max_pool2d {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.dense_array"
    %a4 = irdl.base "#builtin.integer"
    %a5 = irdl.base "#builtin.string"
    irdl.attributes {"kernel" = %a0, "strides" = %a1, "padding" = %a2, "dilations" = %a3, "ceil_mode" = %a4, "layout" = %a5}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @avg_pool2d {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.integer"
    %a4 = irdl.base "#builtin.integer"
    %a5 = irdl.base "#builtin.string"
    irdl.attributes {"kernel" = %a0, "strides" = %a1, "padding" = %a2, "ceil_mode" = %a3, "count_include_pad" = %a4, "layout" = %a5}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @global_avg_pool {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.string"
    irdl.attributes {"layout" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @softmax {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @log_softmax {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the result type carries the new shape
  irdl.operation @reshape {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @transpose {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.dense_array"
    irdl.attributes {"perm" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  //
  irdl.operation @concat {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // pads = [begin..., end...]
  irdl.operation @pad {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.float"
    irdl.attributes {"pads" = %a0, "value" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // out[i] = x[starts + i * steps] on every axis: 0 <= start < end <= size, steps >= 1
  irdl.operation @slice {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    irdl.attributes {"starts" = %a0, "ends" = %a1, "steps" = %a2}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // sum, mean, max or min over axes; keepdims = 1 keeps them as size 1
  irdl.operation @reduce {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.string"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.integer"
    irdl.attributes {"kind" = %a0, "axes" = %a1, "keepdims" = %a2}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // softmax(scale * q @ k^T + mask [+ causal: -inf where key > query index]) @ v per batch and head; layout BHSD: q [B,H,Sq,D], k/v [B,H,Sk,D]; BSHD: q [B,Sq,H,D], k/v [B,Sk,H,D] (the heads of a projection, untransposed); the result is shaped like q; mask broadcastable to [B,H,Sq,Sk], or [P,..] with P dividing B tiling the batch (batch b reads mask[b mod P]: Swin's P windows per image)
  irdl.operation @attention {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    irdl.operands(query: %t0, key: %t1, value: %t2, mask: optional %t3)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.integer"
    %a2 = irdl.base "#builtin.string"
    irdl.attributes {"scale" = %a0, "causal" = %a1, "layout" = %a2}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the input's values in the result's element type (float -> int truncates toward zero, anything -> bool is != 0)
  irdl.operation @cast {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // lhs <kind> rhs elementwise with broadcasting (eq, ne, lt, le, gt, ge): a bool tensor
  irdl.operation @compare {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %a0 = irdl.base "#builtin.string"
    irdl.attributes {"kind" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // and, or, xor of two bool tensors, broadcasting
  irdl.operation @logical {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %t0, rhs: %t1)
    %a0 = irdl.base "#builtin.string"
    irdl.attributes {"kind" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // not of a bool tensor
  irdl.operation @logical_not {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // condition ? lhs : rhs elementwise, the three broadcast
  irdl.operation @where {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(condition: %t0, lhs: %t1, rhs: %t2)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the input broadcast (numpy rules) to the result type's shape
  irdl.operation @broadcast {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // out[a.., i.., b..] = input[a.., indices[i..], b..] (ONNX Gather, an embedding lookup on axis 0); an index in [-size, 0) counts from the end, one out of range is read as the nearest in range and reported by the plan's bounds_check
  irdl.operation @gather {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, indices: %t1)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // out[i] = input[i with its axis coordinate replaced by indices[i]] (torch.gather); indices are shaped like the result
  irdl.operation @gather_elements {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, indices: %t1)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the input with out[a.., indices[j], b..] = updates[a.., j, b..] along axis (torch.index_copy: a KV cache written at its positions); indices 1-d, updates shaped like the input with len(indices) on the axis; an index out of range writes nothing and is reported by the plan's bounds_check
  irdl.operation @index_copy {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, indices: %t1, updates: %t2)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // running sums along axis (exclusive: without the element itself; reverse: from the end)
  irdl.operation @cumsum {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.integer"
    %a1 = irdl.base "#builtin.integer"
    %a2 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0, "exclusive" = %a1, "reverse" = %a2}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the number of indices outside [-size, size), a 1-element i32 tensor the runtime reads after a run
  irdl.operation @bounds_check {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(indices: %t0)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"size" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_input of conv2d: dx[n, c, ih, iw] = sum of dy[n, k, oh, ow] * w[k, c, r, s] over the (k, r, s) of c's group with oh * sh + r * dh - pt = ih (likewise w); input_size = the forward input's [H, W]
  irdl.operation @conv2d_backward_data {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, filter: %t1)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.integer"
    %a4 = irdl.base "#builtin.string"
    %a5 = irdl.base "#builtin.string"
    %a6 = irdl.base "#builtin.dense_array"
    irdl.attributes {"strides" = %a0, "padding" = %a1, "dilations" = %a2, "groups" = %a3, "layout" = %a4, "filter_layout" = %a5, "input_size" = %a6}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_filter of conv2d: dw[k, c, r, s] = sum over n, oh, ow of dy[n, k, oh, ow] * x_padded[n, c, oh * sh + r * dh, ow * sw + s * dw] within k's group; filter_size = [R, S], the result in filter_layout
  irdl.operation @conv2d_backward_weights {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, grad_output: %t1)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.integer"
    %a4 = irdl.base "#builtin.string"
    %a5 = irdl.base "#builtin.string"
    %a6 = irdl.base "#builtin.dense_array"
    irdl.attributes {"strides" = %a0, "padding" = %a1, "dilations" = %a2, "groups" = %a3, "layout" = %a4, "filter_layout" = %a5, "filter_size" = %a6}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // y = (x - mean) / sqrt(var + eps) * scale + shift with the batch's statistics per channel: mean and biased variance over N, H, W
  irdl.operation @batch_norm_training {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0, scale: %t1, shift: %t2)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.string"
    irdl.attributes {"epsilon" = %a0, "layout" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the batch's statistics per channel as one [2, C] tensor: row 0 the mean over N, H, W, row 1 the inverse standard deviation 1 / sqrt(biased var + eps) (what batch_norm_backward takes); one op for the two, as a prim op has one result and both come out of the same passes over the input
  irdl.operation @batch_norm_statistics {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(input: %t0)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.string"
    irdl.attributes {"epsilon" = %a0, "layout" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_input of batch_norm_training: dx = scale * inv_std / M * (M dy - sum(dy) - xhat sum(dy xhat)), xhat = (x - saved_mean) * saved_inv_std, the sums over the M = N H W values of a channel; with sums (batch_norm_backward_sums of the same operands, made for the scale and shift gradients) they are read from it, not summed again: one pass over dy and x
  irdl.operation @batch_norm_backward {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    %t3 = irdl.base "!builtin.tensor"
    %t4 = irdl.base "!builtin.tensor"
    %t5 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, input: %t1, scale: %t2, saved_mean: %t3, saved_inv_std: %t4, sums: optional %t5)
    %a0 = irdl.base "#builtin.string"
    irdl.attributes {"layout" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the two sums per channel that batch norm's scale and shift gradients are, as one [2, C] tensor: row 0 sum(dy), row 1 sum(dy (x - saved_mean)) over N, H, W (times saved_inv_std: the scale's gradient); one pass over dy and x for both, as batch_norm_backward makes them for grad_input
  irdl.operation @batch_norm_backward_sums {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, input: %t1, saved_mean: %t2)
    %a0 = irdl.base "#builtin.string"
    irdl.attributes {"layout" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_input of layer_norm over the trailing normalized_ndim dims (D values, the statistics recomputed): g = dy * scale, dx = inv_std / D * (D g - sum(g) - xhat sum(g xhat))
  irdl.operation @layer_norm_backward {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, input: %t1, scale: optional %t2)
    %a0 = irdl.base "#builtin.float"
    %a1 = irdl.base "#builtin.integer"
    irdl.attributes {"epsilon" = %a0, "normalized_ndim" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // dy * act'(x) for the epilogue activations (relu6 is clamp 0..6, gelu_tanh the tanh form); at the kinks PyTorch's choice: relu'(0) = 0, clamp' = 0 at and outside the bounds, hardswish' = x/3 + 1/2 on (-3, 3), 0 at -3, 1 at 3
  irdl.operation @activation_backward {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, input: %t1)
    %a0 = irdl.base "#builtin.string"
    %a1 = irdl.base "#builtin.dense_array"
    irdl.attributes {"activation" = %a0, "activation_params" = %a1}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_input of max_pool2d: each window's dy goes to the first maximum of the window (row-major, padding never wins), summed where windows overlap
  irdl.operation @max_pool2d_backward {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, input: %t1)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.dense_array"
    %a4 = irdl.base "#builtin.integer"
    %a5 = irdl.base "#builtin.string"
    irdl.attributes {"kernel" = %a0, "strides" = %a1, "padding" = %a2, "dilations" = %a3, "ceil_mode" = %a4, "layout" = %a5}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_input of avg_pool2d: each window's dy / its divisor (count_include_pad and ceil_mode as the forward) to every input position of the window; input_size = the forward input's [H, W] (the values of the input are not needed)
  irdl.operation @avg_pool2d_backward {
    %t0 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0)
    %a0 = irdl.base "#builtin.dense_array"
    %a1 = irdl.base "#builtin.dense_array"
    %a2 = irdl.base "#builtin.dense_array"
    %a3 = irdl.base "#builtin.integer"
    %a4 = irdl.base "#builtin.integer"
    %a5 = irdl.base "#builtin.string"
    %a6 = irdl.base "#builtin.dense_array"
    irdl.attributes {"kernel" = %a0, "strides" = %a1, "padding" = %a2, "ceil_mode" = %a3, "count_include_pad" = %a4, "layout" = %a5, "input_size" = %a6}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_input of softmax from its output y: dx = y * (dy - sum(dy * y)) along axis
  irdl.operation @softmax_backward {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, output: %t1)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_input of log_softmax from its output y: dx = dy - exp(y) * sum(dy) along axis
  irdl.operation @log_softmax_backward {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(grad_output: %t0, output: %t1)
    %a0 = irdl.base "#builtin.integer"
    irdl.attributes {"axis" = %a0}
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // the mean over the N rows of logsumexp(logits[n]) - logits[n, targets[n]]: logits [N, C], integer targets [N] (a class index, read as the nearest in range when out of it), result [1]
  irdl.operation @cross_entropy {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    irdl.operands(logits: %t0, targets: %t1)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
  // grad_logits of cross_entropy: (softmax(logits) - onehot(targets)) / N, times grad_output [1] when given
  irdl.operation @cross_entropy_backward {
    %t0 = irdl.base "!builtin.tensor"
    %t1 = irdl.base "!builtin.tensor"
    %t2 = irdl.base "!builtin.tensor"
    irdl.operands(logits: %t0, targets: %t1, grad_output: optional %t2)
    %res = irdl.base "!builtin.tensor"
    irdl.results(result: %res)
  }
}
