// RUN: thunder-ir-opt -p 'autodiff{requires_grad=true,false},remat-split{policy=save-all}' %s | filecheck %s
// RUN: thunder-ir-opt -p 'autodiff{requires_grad=true,false},remat-split{policy=min-cut}' %s | filecheck %s --check-prefix=MINCUT

// remat-split replaces @joint by @forward (outputs, then residuals) and
// @backward (residuals and cotangents in, gradients out) in the same module. The
// backward's dead ops (the gradient of %y, which needs none) are gone. save-all saves
// what the backward reads (%y and exp's result); min-cut recomputes the cheap elementwise
// chain from the inputs instead, when that saves bytes.

func.func @forward(%x: !prims.tensor<4xf32, cpu>, %y: !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu> {
  %0 = "prims.mul"(%x, %y) : (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %1 = "prims.exp"(%0) : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  func.return %1 : !prims.tensor<4xf32, cpu>
}

// CHECK-NOT:   @joint
// CHECK:       func.func @forward(%x: !prims.tensor<4xf32, cpu>, %y: !prims.tensor<4xf32, cpu>)
// CHECK-NEXT:  %[[M:.*]] = "prims.mul"(%x, %y)
// CHECK-NEXT:  %[[E:.*]] = "prims.exp"(%[[M]])
// CHECK-NEXT:  func.return %[[E]], %y, %[[E]]
// CHECK:       func.func @backward(%y: !prims.tensor<4xf32, cpu>, %[[R:.*]]: !prims.tensor<4xf32, cpu>, %ct: !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
// CHECK-SAME:  autograd.layout = #autograd.backward<inputs = 2, outputs = 1, residuals = 2, grad_inputs = [0], ct_outputs = [0], reaches = [[0]]>
// CHECK-NEXT:  %[[D:.*]] = "prims.mul"(%ct, %[[R]])
// CHECK-NEXT:  %[[DX:.*]] = "prims.mul"(%[[D]], %y)
// CHECK-NEXT:  func.return %[[DX]]

// MINCUT:      func.func @forward
// MINCUT:      func.return %{{.*}}, %x, %y
// MINCUT:      func.func @backward(%x: !prims.tensor<4xf32, cpu>, %y: !prims.tensor<4xf32, cpu>, %ct: !prims.tensor<4xf32, cpu>)
// MINCUT-NEXT: %[[M:.*]] = "prims.mul"(%x, %y)
// MINCUT-NEXT: %[[E:.*]] = "prims.exp"(%[[M]])
// MINCUT-NEXT: %[[D:.*]] = "prims.mul"(%ct, %[[E]])
