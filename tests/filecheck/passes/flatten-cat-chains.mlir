// RUN: thunder-ir-opt --split-input-file -p flatten-cat-chains %s | filecheck %s

// A buffer of zeros filled a slice per step (`out[:, t] = k[:, t].tanh()`, as the frontend
// traces it: each write a cat of the old buffer's slices around the new slice): one cat of
// the three written slices; the zeros and the intermediate buffers are erased.

func.func @loop(%k: !prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x3x2xf32, cpu> {
  %0 = "ltorch.zeros"() <{size = array<i64: 2, 3, 2>, dtype = f32, device = "cpu"}> : () -> !prims.tensor<2x3x2xf32, cpu>
  %1 = "ltorch.getitem"(%k) <{index = [#prims.slice<none, none, none>, 0 : i64]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %2 = "ltorch.tanh"(%1) : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %3 = "ltorch.reshape"(%2) <{shape = array<i64: 2, 1, 2>}> : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %4 = "ltorch.getitem"(%0) <{index = [#prims.slice<none, none, none>, #prims.slice<0, 1, none>]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %5 = "ltorch.getitem"(%0) <{index = [#prims.slice<none, none, none>, #prims.slice<1, none, none>]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu>
  %6 = "ltorch.cat"(%3, %5) <{dim = 1 : i64}> : (!prims.tensor<2x1x2xf32, cpu>, !prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x3x2xf32, cpu>
  %7 = "ltorch.getitem"(%k) <{index = [#prims.slice<none, none, none>, 1 : i64]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %8 = "ltorch.tanh"(%7) : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %9 = "ltorch.reshape"(%8) <{shape = array<i64: 2, 1, 2>}> : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %10 = "ltorch.getitem"(%6) <{index = [#prims.slice<none, none, none>, #prims.slice<0, 1, none>]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %11 = "ltorch.getitem"(%6) <{index = [#prims.slice<none, none, none>, #prims.slice<1, 2, none>]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %12 = "ltorch.getitem"(%6) <{index = [#prims.slice<none, none, none>, #prims.slice<2, none, none>]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %13 = "ltorch.cat"(%10, %9, %12) <{dim = 1 : i64}> : (!prims.tensor<2x1x2xf32, cpu>, !prims.tensor<2x1x2xf32, cpu>, !prims.tensor<2x1x2xf32, cpu>) -> !prims.tensor<2x3x2xf32, cpu>
  %14 = "ltorch.getitem"(%k) <{index = [#prims.slice<none, none, none>, 2 : i64]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %15 = "ltorch.tanh"(%14) : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %16 = "ltorch.reshape"(%15) <{shape = array<i64: 2, 1, 2>}> : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %17 = "ltorch.getitem"(%13) <{index = [#prims.slice<none, none, none>, #prims.slice<0, 2, none>]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu>
  %18 = "ltorch.getitem"(%13) <{index = [#prims.slice<none, none, none>, #prims.slice<2, 3, none>]}> : (!prims.tensor<2x3x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %19 = "ltorch.cat"(%17, %16) <{dim = 1 : i64}> : (!prims.tensor<2x2x2xf32, cpu>, !prims.tensor<2x1x2xf32, cpu>) -> !prims.tensor<2x3x2xf32, cpu>
  func.return %19 : !prims.tensor<2x3x2xf32, cpu>
}

// CHECK-LABEL: func.func @loop
// CHECK-NOT:   ltorch.zeros
// CHECK:       %[[A:.*]] = "ltorch.reshape"
// CHECK:       %[[B:.*]] = "ltorch.reshape"
// CHECK:       %[[C:.*]] = "ltorch.reshape"
// CHECK-NEXT:  %[[R:.*]] = "ltorch.cat"(%[[A]], %[[B]], %[[C]]) <{dim = 1 : i64}>
// CHECK-NEXT:  func.return %[[R]]

// -----

// Left alone: the buffer is read (summed) between the writes, so it is computed anyway
// and stays a piece of the last write.

func.func @read_between(%k: !prims.tensor<2x2x2xf32, cpu>) -> (!prims.tensor<2x2x2xf32, cpu>, !prims.tensor<f32, cpu>) {
  %0 = "ltorch.zeros"() <{size = array<i64: 2, 2, 2>, dtype = f32, device = "cpu"}> : () -> !prims.tensor<2x2x2xf32, cpu>
  %1 = "ltorch.getitem"(%k) <{index = [#prims.slice<none, none, none>, 0 : i64]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %2 = "ltorch.tanh"(%1) : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %3 = "ltorch.reshape"(%2) <{shape = array<i64: 2, 1, 2>}> : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %4 = "ltorch.getitem"(%0) <{index = [#prims.slice<none, none, none>, #prims.slice<0, 1, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %5 = "ltorch.getitem"(%0) <{index = [#prims.slice<none, none, none>, #prims.slice<1, none, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %6 = "ltorch.cat"(%3, %5) <{dim = 1 : i64}> : (!prims.tensor<2x1x2xf32, cpu>, !prims.tensor<2x1x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu>
  %7 = "ltorch.sum"(%6) <{keepdim = false}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<f32, cpu>
  %8 = "ltorch.getitem"(%k) <{index = [#prims.slice<none, none, none>, 1 : i64]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %9 = "ltorch.tanh"(%8) : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %10 = "ltorch.reshape"(%9) <{shape = array<i64: 2, 1, 2>}> : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %11 = "ltorch.getitem"(%6) <{index = [#prims.slice<none, none, none>, #prims.slice<0, 1, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %12 = "ltorch.getitem"(%6) <{index = [#prims.slice<none, none, none>, #prims.slice<1, 2, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %13 = "ltorch.cat"(%11, %10) <{dim = 1 : i64}> : (!prims.tensor<2x1x2xf32, cpu>, !prims.tensor<2x1x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu>
  func.return %13, %7 : !prims.tensor<2x2x2xf32, cpu>, !prims.tensor<f32, cpu>
}

// CHECK-LABEL: func.func @read_between
// CHECK:       %[[B:.*]] = "ltorch.cat"
// CHECK-NEXT:  "ltorch.sum"(%[[B]])
// CHECK:       "ltorch.getitem"(%[[B]])
// CHECK:       "ltorch.cat"
// CHECK-NEXT:  func.return

// -----

// Left alone in a program that is differentiated later: the overwritten buffer is a clone
// of an input, whose gradient is zeros (not None) only through the chain.

func.func @input_buffer(%x: !prims.tensor<2x2x2xf32, cpu>, %k: !prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu> {
  %0 = "ltorch.clone"(%x) : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu>
  %1 = "ltorch.getitem"(%k) <{index = [#prims.slice<none, none, none>, 0 : i64]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %2 = "ltorch.reshape"(%1) <{shape = array<i64: 2, 1, 2>}> : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %3 = "ltorch.getitem"(%0) <{index = [#prims.slice<none, none, none>, #prims.slice<0, 1, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %4 = "ltorch.getitem"(%0) <{index = [#prims.slice<none, none, none>, #prims.slice<1, none, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %5 = "ltorch.cat"(%2, %4) <{dim = 1 : i64}> : (!prims.tensor<2x1x2xf32, cpu>, !prims.tensor<2x1x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu>
  %6 = "ltorch.getitem"(%k) <{index = [#prims.slice<none, none, none>, 1 : i64]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x2xf32, cpu>
  %7 = "ltorch.reshape"(%6) <{shape = array<i64: 2, 1, 2>}> : (!prims.tensor<2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %8 = "ltorch.getitem"(%5) <{index = [#prims.slice<none, none, none>, #prims.slice<0, 1, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %9 = "ltorch.getitem"(%5) <{index = [#prims.slice<none, none, none>, #prims.slice<1, 2, none>]}> : (!prims.tensor<2x2x2xf32, cpu>) -> !prims.tensor<2x1x2xf32, cpu>
  %10 = "ltorch.cat"(%8, %7) <{dim = 1 : i64}> : (!prims.tensor<2x1x2xf32, cpu>, !prims.tensor<2x1x2xf32, cpu>) -> !prims.tensor<2x2x2xf32, cpu>
  func.return %10 : !prims.tensor<2x2x2xf32, cpu>
}

// CHECK-LABEL: func.func @input_buffer
// CHECK:       %[[X:.*]] = "ltorch.clone"(%x)
// CHECK:       %[[B:.*]] = "ltorch.cat"
// CHECK:       "ltorch.getitem"(%[[B]])
// CHECK:       "ltorch.cat"
// CHECK-NEXT:  func.return
