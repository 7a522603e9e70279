// RUN: thunder-ir-opt -p restride-outputs %s | filecheck %s

// restride-outputs: a user result that a prims op makes (a decomposition; a fusion region
// likewise), directly or through a view, goes through tir.restride with eager's strides
// (the forward's torch.output_strides); one eager's own kernel makes (an ltorch op, an
// opaque torch.call) is left alone, and so is an output without recorded strides (a
// write-back).

func.func @forward(%x: !prims.tensor<4x6xf32, cpu>) -> (!prims.tensor<4x6xf32, cpu>, !prims.tensor<6x4xf32, cpu>, !prims.tensor<4x6xf32, cpu>, !prims.tensor<4x6xf32, cpu>) attributes {torch.output_strides = #torch.output_strides<[[1, 4], [4, 1], [6, 1], none]>} {
  %0 = "prims.exp"(%x) : (!prims.tensor<4x6xf32, cpu>) -> !prims.tensor<4x6xf32, cpu>
  %1 = "prims.transpose"(%0) <{permutation = array<i64: 1, 0>}> : (!prims.tensor<4x6xf32, cpu>) -> !prims.tensor<6x4xf32, cpu>
  %2 = "ltorch.sin"(%x) : (!prims.tensor<4x6xf32, cpu>) -> !prims.tensor<4x6xf32, cpu>
  func.return %0, %1, %2, %0 : !prims.tensor<4x6xf32, cpu>, !prims.tensor<6x4xf32, cpu>, !prims.tensor<4x6xf32, cpu>, !prims.tensor<4x6xf32, cpu>
}

// CHECK:       %[[E:.*]] = "prims.exp"(%x)
// CHECK-NEXT:  %[[T:.*]] = "prims.transpose"(%[[E]])
// CHECK-NEXT:  %[[S:.*]] = "ltorch.sin"(%x)
// CHECK-NEXT:  %[[R0:.*]] = "torch.call"(%[[E]]) <{callee = "thunder_ir.runtime.namespace.restride", args = [#prims.operand<0>, array<i64: 1, 4>]}>
// CHECK-NEXT:  %[[R1:.*]] = "torch.call"(%[[T]]) <{callee = "thunder_ir.runtime.namespace.restride", args = [#prims.operand<0>, array<i64: 4, 1>]}>
// CHECK-NEXT:  func.return %[[R0]], %[[R1]], %[[S]], %[[E]]
