// RUN: thunder-ir-opt -p restride-outputs %s | filecheck %s

// A result that stands for memory an in-place write changed (torch.written_outputs:
// `y[1] = 1; return y` of a column-major y) is restrided though an ltorch op (the write's
// functional cat) computes it: that op lays its result out as its own, not as y is. The
// same value returned where no write made it (output 1) is eager's kernel's, left alone.

func.func @forward(%x: !prims.tensor<1x3xf32, cpu>, %r: !prims.tensor<1x3xf32, cpu>) -> (!prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>) attributes {torch.output_strides = #torch.output_strides<[[1, 2], [3, 1]]>, torch.written_outputs = array<i64: 0>} {
  %0 = "ltorch.cat"(%x, %r) <{dim = 0 : i64}> : (!prims.tensor<1x3xf32, cpu>, !prims.tensor<1x3xf32, cpu>) -> !prims.tensor<2x3xf32, cpu>
  func.return %0, %0 : !prims.tensor<2x3xf32, cpu>, !prims.tensor<2x3xf32, cpu>
}

// CHECK:       %[[C:.*]] = "ltorch.cat"(%x, %r)
// CHECK-NEXT:  %[[W:.*]] = "torch.call"(%[[C]]) <{callee = "thunder_ir.runtime.namespace.restride", args = [#prims.operand<0>, array<i64: 1, 2>]}>
// CHECK-NEXT:  func.return %[[W]], %[[C]]
