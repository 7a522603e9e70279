// RUN: thunder-ir-opt -p schedule-collectives %s | filecheck %s

// Waits move down to their first use; each layer's all-gather starts before the previous
// layer's wait (prefetch), so %w2 travels while the first linear computes.

func.func @forward(%x: !prims.tensor<2x4xf32, cpu>, %w1: !prims.tensor<2x4xf32, cpu>, %w2: !prims.tensor<2x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu> {
  %h1 = "dist.all_gather"(%w1) <{group = "world", world = 2 : i64}> : (!prims.tensor<2x4xf32, cpu>) -> !dist.pending<!prims.tensor<4x4xf32, cpu>>
  %f1 = "dist.wait"(%h1) : (!dist.pending<!prims.tensor<4x4xf32, cpu>>) -> !prims.tensor<4x4xf32, cpu>
  %h2 = "dist.all_gather"(%w2) <{group = "world", world = 2 : i64}> : (!prims.tensor<2x4xf32, cpu>) -> !dist.pending<!prims.tensor<4x4xf32, cpu>>
  %f2 = "dist.wait"(%h2) : (!dist.pending<!prims.tensor<4x4xf32, cpu>>) -> !prims.tensor<4x4xf32, cpu>
  %y1 = "prims.linear"(%x, %f1) : (!prims.tensor<2x4xf32, cpu>, !prims.tensor<4x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
  %a1 = "prims.tanh"(%y1) : (!prims.tensor<2x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
  %y2 = "prims.linear"(%a1, %f2) : (!prims.tensor<2x4xf32, cpu>, !prims.tensor<4x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
  func.return %y2 : !prims.tensor<2x4xf32, cpu>
}

// CHECK:      %h1 = "dist.all_gather"(%w1)
// CHECK-NEXT: %h2 = "dist.all_gather"(%w2)
// CHECK-NEXT: %f1 = "dist.wait"(%h1)
// CHECK-NEXT: %y1 = "prims.linear"(%x, %f1)
// CHECK-NEXT: %a1 = "prims.tanh"(%y1)
// CHECK-NEXT: %f2 = "dist.wait"(%h2)
// CHECK-NEXT: %y2 = "prims.linear"(%a1, %f2)
