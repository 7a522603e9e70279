// RUN: thunder-ir-opt -p 'autodiff{requires_grad=true,false}' %s | filecheck %s

// autodiff replaces the program's function by @joint: the forward ops, then the backward
// ops its VJP rules emit, reading the output's cotangent %ct. It returns the outputs, then
// the gradients of the inputs that require grad (%x, not %y). Its layout (how many
// inputs, outputs and forward ops; which inputs get gradients) is a typed attribute,
// #autograd.joint.

func.func @forward(%x: !prims.tensor<4xf32, cpu>, %y: !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu> {
  %0 = "prims.mul"(%x, %y) : (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %1 = "prims.exp"(%0) : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  func.return %1 : !prims.tensor<4xf32, cpu>
}

// CHECK-NOT:   @forward
// CHECK:       func.func @joint(%x: !prims.tensor<4xf32, cpu>, %y: !prims.tensor<4xf32, cpu>, %ct: !prims.tensor<4xf32, cpu>) -> (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>)
// CHECK-SAME:  autograd.layout = #autograd.joint<inputs = 2, outputs = 1, forward_ops = 2, grad_inputs = [0], ct_outputs = [0], reaches = [[0]]>
// CHECK-NEXT:  %[[M:.*]] = "prims.mul"(%x, %y)
// CHECK-NEXT:  %[[E:.*]] = "prims.exp"(%[[M]])
// CHECK-NEXT:  %[[D:.*]] = "prims.mul"(%ct, %[[E]])
// CHECK-NEXT:  %[[DX:.*]] = "prims.mul"(%[[D]], %y)
// CHECK-NEXT:  "prims.mul"(%[[D]], %x)
// CHECK-NEXT:  func.return %[[E]], %[[DX]]
