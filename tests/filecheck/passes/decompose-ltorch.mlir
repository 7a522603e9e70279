// RUN: thunder-ir-opt --split-input-file -p decompose-ltorch %s | filecheck %s

// ltorch.add promotes (f16 -> f32) and broadcasts ([8] -> [4, 8]) explicitly in prims;
// alpha becomes a multiplication by a constant; ltorch.linear maps to prims.linear with
// or without a bias. Each new op keeps the source location of the op it replaces.

func.func @add_linear(%x: !prims.tensor<4x8xf32, cpu>, %b: !prims.tensor<8xf16, cpu>, %w: !prims.tensor<16x8xf32, cpu>, %bias: !prims.tensor<16xf32, cpu>) -> (!prims.tensor<4x16xf32, cpu>, !prims.tensor<4x16xf32, cpu>) {
  %0 = "ltorch.add"(%x, %b) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<8xf16, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":10:0)
  %1 = "ltorch.add"(%x, %x) <{alpha = 2 : i64}> : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":11:0)
  %2 = "ltorch.linear"(%0, %w, %bias) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>, !prims.tensor<16xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> loc("model.py":12:0)
  %3 = "ltorch.linear"(%1, %w) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> loc("model.py":13:0)
  func.return %2, %3 : !prims.tensor<4x16xf32, cpu>, !prims.tensor<4x16xf32, cpu>
}

// CHECK-LABEL: func.func @add_linear
// CHECK-NOT:   ltorch.
// CHECK:       %[[CONV:.*]] = "prims.convert_element_type"(%b) <{dtype = f32}> : (!prims.tensor<8xf16, cpu>) -> !prims.tensor<8xf32, cpu> loc("model.py":10:0)
// CHECK-NEXT:  %[[BCAST:.*]] = "prims.broadcast_in_dim"(%[[CONV]]) <{shape = array<i64: 4, 8>, broadcast_dims = array<i64: 1>}> : (!prims.tensor<8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":10:0)
// CHECK-NEXT:  %[[SUM:.*]] = "prims.add"(%x, %[[BCAST]]) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<4x8xf32, cpu>) -> !prims.tensor<4x8xf32, cpu> loc("model.py":10:0)
// CHECK:       %[[ALPHA:.*]] = "prims.constant"() <{value = 2{{.*}}}> {{.*}} loc("model.py":11:0)
// CHECK:       %[[SCALED:.*]] = "prims.mul"(%x, %[[ALPHA]]) {{.*}} loc("model.py":11:0)
// CHECK:       %[[SUM2:.*]] = "prims.add"(%x, %[[SCALED]]) {{.*}} loc("model.py":11:0)
// CHECK-NOT:   ltorch.
// CHECK:       %[[Y:.*]] = "prims.linear"(%[[SUM]], %w, %bias) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>, !prims.tensor<16xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> loc("model.py":12:0)
// CHECK-NEXT:  %[[Z:.*]] = "prims.linear"(%[[SUM2]], %w) : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> loc("model.py":13:0)
// CHECK-NEXT:  func.return %[[Y]], %[[Z]]

// -----

// An op an executor claimed stays whole.

func.func @claimed(%x: !prims.tensor<4x8xf32, cpu>, %w: !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu> {
  %0 = "ltorch.linear"(%x, %w) {fusion.claimed = #fusion.executor<"torch">} : (!prims.tensor<4x8xf32, cpu>, !prims.tensor<16x8xf32, cpu>) -> !prims.tensor<4x16xf32, cpu>
  func.return %0 : !prims.tensor<4x16xf32, cpu>
}

// CHECK-LABEL: func.func @claimed
// CHECK-NEXT:  "ltorch.linear"(%x, %w) {fusion.claimed = #fusion.executor<"torch">}
