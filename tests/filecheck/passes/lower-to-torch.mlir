// RUN: thunder-ir-opt -p lower-to-torch %s | filecheck %s

// Every ltorch/prims op becomes the torch.call that computes it: the op's torch function
// where its reference is that call (torch.mul, torch.exp), else its reference
// implementation, registered in the generated-code namespace (prims.sum: tir.prims_sum).

func.func @forward(%x: !prims.tensor<4xf32, cpu>, %y: !prims.tensor<4xf32, cpu>) -> !prims.tensor<f32, cpu> {
  %0 = "prims.mul"(%x, %y) : (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %1 = "ltorch.exp"(%0) : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %2 = "prims.sum"(%1) <{dims = array<i64: 0>}> : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<f32, cpu>
  func.return %2 : !prims.tensor<f32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[M:.*]] = "torch.call"(%x, %y) <{callee = "torch.mul", args = [#prims.operand<0>, #prims.operand<1>]}>
// CHECK-NEXT:  %[[E:.*]] = "torch.call"(%[[M]]) <{callee = "torch.exp", args = [#prims.operand<0>]}>
// CHECK-NEXT:  %[[S:.*]] = "torch.call"(%[[E]]) <{callee = "thunder_ir.runtime.namespace.prims_sum", args = [#prims.operand<0>], kwargs = {dims = array<i64: 0>}}>
// CHECK-NEXT:  func.return %[[S]]
