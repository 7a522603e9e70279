// RUN: thunder-ir-opt -p del-last-used %s | filecheck %s
// RUN: thunder-ir-opt -p del-last-used -t python %s | filecheck %s --check-prefix=PY

// Code generation compiles each function of the program (here a forward and a
// backward) to Python and leaves the IR as it is; -t python prints each function.

func.func @forward(%x: !prims.tensor<4xf32, cpu>) -> (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>) {
  %0 = "torch.call"(%x) <{callee = "torch.exp", args = [#prims.operand<0>]}> : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  func.return %0, %0 : !prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>
}
func.func @backward(%e: !prims.tensor<4xf32, cpu>, %ct: !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu> {
  %0 = "torch.call"(%ct, %e) <{callee = "torch.mul", args = [#prims.operand<0>, #prims.operand<1>]}> : (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  func.return %0 : !prims.tensor<4xf32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[E:.*]] = "torch.call"(%x) <{callee = "torch.exp", args = [#prims.operand<0>]}>
// CHECK-NEXT:  func.return %[[E]], %[[E]]
// CHECK-LABEL: func.func @backward
// CHECK-NEXT:  %[[G:.*]] = "torch.call"(%ct, %e) <{callee = "torch.mul", args = [#prims.operand<0>, #prims.operand<1>]}>
// CHECK-NEXT:  func.return %[[G]]

// PY: def forward(x):
// PY:   torch.exp(x)
// PY: def backward(args):
// PY:   (e, ct,) = args
// PY:   args.clear()
// PY:   torch.mul(ct, e)
