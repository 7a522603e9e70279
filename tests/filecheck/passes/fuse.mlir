// RUN: thunder-ir-opt -p 'fuse{executors=torch_compile}' %s | filecheck %s
// RUN: thunder-ir-opt -p 'fuse{executors=torch}' %s | filecheck %s --check-prefix=NOFUSER

// A fusion executor's fusible prims (here a producer/consumer chain ending in a
// reduction) become one fusion.region, its kernel named by the executor's prefix. With no
// fusion executor, nothing changes.

func.func @forward(%x: !prims.tensor<4xf32, cpu>, %y: !prims.tensor<4xf32, cpu>) -> !prims.tensor<f32, cpu> {
  %0 = "prims.mul"(%x, %y) : (!prims.tensor<4xf32, cpu>, !prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %1 = "prims.exp"(%0) : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<4xf32, cpu>
  %2 = "prims.sum"(%1) <{dims = array<i64: 0>}> : (!prims.tensor<4xf32, cpu>) -> !prims.tensor<f32, cpu>
  func.return %2 : !prims.tensor<f32, cpu>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:  %[[R:.*]] = "fusion.region"(%x, %y) <{executor = "torch_compile", kernel = "inductorFusion0"}> ({
// CHECK-NEXT:  ^bb0(%[[A:.*]]: !prims.tensor<4xf32, cpu>, %[[B:.*]]: !prims.tensor<4xf32, cpu>):
// CHECK-NEXT:    %[[M:.*]] = "prims.mul"(%[[A]], %[[B]])
// CHECK-NEXT:    %[[E:.*]] = "prims.exp"(%[[M]])
// CHECK-NEXT:    %[[S:.*]] = "prims.sum"(%[[E]])
// CHECK-NEXT:    "fusion.yield"(%[[S]])
// CHECK-NEXT:  })
// CHECK-NEXT:  func.return %[[R]]

// NOFUSER-NOT: fusion.region
