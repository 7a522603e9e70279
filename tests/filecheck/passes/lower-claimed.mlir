// RUN: thunder-ir-opt -p 'lower-claimed{executors=triton}' %s | filecheck %s
// RUN: thunder-ir-opt -p 'lower-claimed{executors=torch}' %s | filecheck %s --check-prefix=TORCH

// An op claimed by an executor with a lowering of its own becomes the ops that executor
// returns: the Triton executor's cross entropy is a call of its kernel. The torch
// executor has none (lower-to-torch lowers its claims), so its pass changes nothing.

func.func @forward(%x: !prims.tensor<4x5xf32, cpu>, %t: !prims.tensor<4xi64, cpu>) -> !prims.tensor<f32, cpu> {
  %0 = "ltorch.cross_entropy"(%x, %t) <{ignore_index = -100 : i64, reduction = "mean", label_smoothing = 0.000000e+00 : f64}> {fusion.claimed = #fusion.executor<"triton">} : (!prims.tensor<4x5xf32, cpu>, !prims.tensor<4xi64, cpu>) -> !prims.tensor<f32, cpu>
  func.return %0 : !prims.tensor<f32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[C:.*]] = "torch.call"(%x, %t) <{callee = "thunder_ir.runtime.namespace.triton_cross_entropy_forward", args = [#prims.operand<0>, #prims.operand<1>], kwargs = {ignore_index = -100 : i64, reduction = "mean", label_smoothing = 0.000000e+00 : f64}}>
// CHECK-NEXT:  func.return %[[C]]

// TORCH:       "ltorch.cross_entropy"(%x, %t)
