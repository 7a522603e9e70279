// RUN: thunder-ir-opt -p fsdp-zero3 %s | filecheck %s

// ZERO3: the forward returns the shard %w, not the gathered %f, as the backward's
// residual; the backward gathers it again, and the forward's %f is freed after its use.

func.func @forward(%x: !prims.tensor<2x4xf32, cpu>, %w: !prims.tensor<2x4xf32, cpu>) -> (!prims.tensor<2x4xf32, cpu>, !prims.tensor<4x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>) {
  %h = "dist.all_gather"(%w) <{group = "world", world = 2 : i64}> : (!prims.tensor<2x4xf32, cpu>) -> !dist.pending<!prims.tensor<4x4xf32, cpu>>
  %f = "dist.wait"(%h) : (!dist.pending<!prims.tensor<4x4xf32, cpu>>) -> !prims.tensor<4x4xf32, cpu>
  %y = "prims.linear"(%x, %f) : (!prims.tensor<2x4xf32, cpu>, !prims.tensor<4x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
  func.return %y, %f, %x : !prims.tensor<2x4xf32, cpu>, !prims.tensor<4x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>
}
func.func @backward(%f: !prims.tensor<4x4xf32, cpu>, %x: !prims.tensor<2x4xf32, cpu>, %ct: !prims.tensor<2x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu> attributes {autograd.layout = #autograd.backward<inputs = 2, outputs = 1, residuals = 2, grad_inputs = [0], ct_outputs = [0], reaches = [[0]]>} {
  %gx = "prims.matmul"(%ct, %f) : (!prims.tensor<2x4xf32, cpu>, !prims.tensor<4x4xf32, cpu>) -> !prims.tensor<2x4xf32, cpu>
  func.return %gx : !prims.tensor<2x4xf32, cpu>
}

// CHECK:      func.func @forward(%x: !prims.tensor<2x4xf32, cpu>, %w: !prims.tensor<2x4xf32, cpu>) -> (!prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>, !prims.tensor<2x4xf32, cpu>)
// CHECK:      func.return %y, %w, %x
// CHECK:      func.func @backward(%0: !prims.tensor<2x4xf32, cpu>, %x: !prims.tensor<2x4xf32, cpu>, %ct: !prims.tensor<2x4xf32, cpu>)
// CHECK-NEXT: %h = "dist.all_gather"(%0) <{group = "world", world = 2 : i64}>
// CHECK-NEXT: %f = "dist.wait"(%h)
// CHECK-NEXT: %gx = "prims.matmul"(%ct, %f)
