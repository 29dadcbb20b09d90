// RUN: tidal-opt %s --split-input-file --verify-diagnostics
// One case per verifier rule. Each must produce exactly the expected diagnostic.

func.func @pred_not_i1(%p: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.cond' op predicate (operand #0) must be a 0-d i1 tensor (tensor<i1> or !torch.vtensor<[],i1>), got tensor<i32>}}
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @pred_not_0d(%p: tensor<1xi1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{predicate (operand #0) must be a 0-d i1 tensor}}
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<1xi1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @cond_wrong_yield_type(%p: tensor<i1>, %x: tensor<4xf32>, %y: tensor<4xf64>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.cond' op else region yield #0 (result #0) has type tensor<4xf64> but expected tensor<4xf32>}}
  %r = "tidal.cond"(%p, %x, %y) ({
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf64>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf64>):
    "tidal.yield"(%b) : (tensor<4xf64>) -> ()
  }) : (tensor<i1>, tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @cond_block_arg_type(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.cond' op then region block argument #0 (operand #1) has type tensor<3xf32> but expected tensor<4xf32>}}
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<3xf32>):
    %w = "test.widen"(%a) : (tensor<3xf32>) -> tensor<4xf32>
    "tidal.yield"(%w) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @cond_yield_count(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.cond' op then region yields 2 value(s) but expects 1 (result #0)}}
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @cond_one_region(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.cond' op expects 2 region(s) (then, else) but has 1}}
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @missing_terminator(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.cond' op else region must end with 'tidal.yield'}}
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    %n = arith.negf %a : tensor<4xf32>
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @two_blocks(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.cond' op then region must have exactly one block, has 2}}
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    "test.br"()[^bb1] : () -> ()
  ^bb1:
    %m = "test.make"() : () -> tensor<4xf32>
    "tidal.yield"(%m) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @while_carry_mismatch(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.while' op body region yield #0 (carry #0 (carry match)) has type tensor<4xf64> but expected tensor<4xf32>}}
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    %d = "test.widen"(%a) : (tensor<4xf32>) -> tensor<4xf64>
    "tidal.yield"(%d) : (tensor<4xf64>) -> ()
  }) {num_carries = 1 : i64} : (tensor<4xf32>, tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @while_pred_not_i1(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.while' op cond region must yield one 0-d i1 tensor predicate, got tensor<4xf32>}}
  %r = "tidal.while"(%x) ({
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) {num_carries = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @while_stacked_result_not_stacked(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.while' op result #0 has type tensor<4xf32> but the stacked carry operand #0 has type tensor<?x4xf32>}}
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) {num_carries = 1 : i64, stack_outputs = true} : (tensor<4xf32>, tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @while_missing_num_carries(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.while' op requires integer attribute 'num_carries'}}
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>, tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @while_num_carries_out_of_range(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.while' op attribute 'num_carries' = 3 is out of range: must be [0, 2]}}
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) {num_carries = 3 : i64} : (tensor<4xf32>, tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @while_result_count(%x: tensor<4xf32>, %p: tensor<i1>) -> (tensor<4xf32>, tensor<i1>) {
  // expected-error@+1 {{'tidal.while' op has 2 result(s) but num_carries = 1}}
  %r:2 = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) {num_carries = 1 : i64} : (tensor<4xf32>, tensor<i1>) -> (tensor<4xf32>, tensor<i1>)
  return %r#0, %r#1 : tensor<4xf32>, tensor<i1>
}

// -----

func.func @num_carries_not_integer(%x: tensor<4xf32>, %p: tensor<i1>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.while' op attribute 'num_carries' must be an integer attribute (e.g. 1 : i64), got "one"}}
  %r = "tidal.while"(%x, %p) ({
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%q) : (tensor<i1>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>, %q: tensor<i1>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) {num_carries = "one"} : (tensor<4xf32>, tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @scan_carry_mismatch(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> (tensor<3xf32>, tensor<4x3xf32>) {
  // expected-error@+1 {{'tidal.scan' op body region yield #0 (carry #0 (carry match)) has type tensor<2xf32> but expected tensor<3xf32>}}
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    %s = "test.shrink"(%c) : (tensor<3xf32>) -> tensor<2xf32>
    "tidal.yield"(%s, %x) : (tensor<2xf32>, tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>) -> (tensor<3xf32>, tensor<4x3xf32>)
  return %r#0, %r#1 : tensor<3xf32>, tensor<4x3xf32>
}

// -----

func.func @scan_xs_disagree(%h: tensor<3xf32>, %xs: tensor<4x3xf32>, %zs: tensor<5x3xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{'tidal.scan' op xs disagree on the size of scanned dim 0: operand #1 has tensor<4x3xf32> but operand #2 has tensor<5x3xf32>}}
  %r = "tidal.scan"(%h, %xs, %zs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>, %z: tensor<3xf32>):
    "tidal.yield"(%c) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 2 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>, tensor<5x3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

func.func @scan_dim_out_of_range(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{'tidal.scan' op dim = 2 is out of range for operand #1 (xs[0]) of type tensor<4x3xf32> (rank 2)}}
  %r = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    "tidal.yield"(%c) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 2 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

func.func @scan_negative_dim(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{'tidal.scan' op attribute 'dim' = -1 is out of range: must be >= 0}}
  %r = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    "tidal.yield"(%c) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = -1 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

func.func @scan_missing_reverse(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{'tidal.scan' op requires bool attribute 'reverse'}}
  %r = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    "tidal.yield"(%c) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64} : (tensor<3xf32>, tensor<4x3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

func.func @scan_num_xs_zero(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{'tidal.scan' op attribute 'num_xs' = 0 is out of range: must be [1, 1]}}
  %r = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<4x3xf32>):
    "tidal.yield"(%c) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 0 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

func.func @scan_slice_type(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{'tidal.scan' op body region block argument #1 (slice of xs[0] along dim 0) has type tensor<4x3xf32> but expected tensor<3xf32>}}
  %r = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<4x3xf32>):
    "tidal.yield"(%c) : (tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>) -> tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

func.func @scan_stacked_result(%h: tensor<3xf32>, %xs: tensor<4x3xf32>) -> (tensor<3xf32>, tensor<5x3xf32>) {
  // expected-error@+1 {{'tidal.scan' op result #1 (ys[0]) has type tensor<5x3xf32> but stacking the yielded tensor<3xf32> along dim 0 gives tensor<4x3xf32>}}
  %r:2 = "tidal.scan"(%h, %xs) ({
  ^bb0(%c: tensor<3xf32>, %x: tensor<3xf32>):
    "tidal.yield"(%c, %x) : (tensor<3xf32>, tensor<3xf32>) -> ()
  }) {num_carries = 1 : i64, num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<3xf32>, tensor<4x3xf32>) -> (tensor<3xf32>, tensor<5x3xf32>)
  return %r#0, %r#1 : tensor<3xf32>, tensor<5x3xf32>
}

// -----

func.func @associative_scan_yield(%xs: tensor<8x2xf32>) -> tensor<8x2xf32> {
  // expected-error@+1 {{'tidal.associative_scan' op combine region yield #0 (combined xs[0]) has type tensor<8x2xf32> but expected tensor<2xf32>}}
  %r = "tidal.associative_scan"(%xs) ({
  ^bb0(%a: tensor<2xf32>, %b: tensor<2xf32>):
    %w = "test.widen"(%a) : (tensor<2xf32>) -> tensor<8x2xf32>
    "tidal.yield"(%w) : (tensor<8x2xf32>) -> ()
  }) {num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<8x2xf32>) -> tensor<8x2xf32>
  return %r : tensor<8x2xf32>
}

// -----

func.func @associative_scan_args(%xs: tensor<8x2xf32>) -> tensor<8x2xf32> {
  // expected-error@+1 {{'tidal.associative_scan' op combine region takes 1 block argument(s) but expects 2 (lhs slice of xs[0], rhs slice of xs[0])}}
  %r = "tidal.associative_scan"(%xs) ({
  ^bb0(%a: tensor<2xf32>):
    "tidal.yield"(%a) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64, dim = 0 : i64, reverse = false} : (tensor<8x2xf32>) -> tensor<8x2xf32>
  return %r : tensor<8x2xf32>
}

// -----

func.func @associative_scan_reverse_not_bool(%xs: tensor<8x2xf32>) -> tensor<8x2xf32> {
  // expected-error@+1 {{'tidal.associative_scan' op attribute 'reverse' must be a bool attribute (true/false), got 1 : i64}}
  %r = "tidal.associative_scan"(%xs) ({
  ^bb0(%a: tensor<2xf32>, %b: tensor<2xf32>):
    "tidal.yield"(%a) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64, dim = 0 : i64, reverse = 1 : i64} : (tensor<8x2xf32>) -> tensor<8x2xf32>
  return %r : tensor<8x2xf32>
}

// -----

func.func @map_result_type(%xs: tensor<5x2xf32>) -> tensor<5x3xf32> {
  // expected-error@+1 {{'tidal.map' op result #0 (ys[0]) has type tensor<5x3xf32> but stacking the yielded tensor<2xf32> along dim 0 gives tensor<5x2xf32>}}
  %r = "tidal.map"(%xs) ({
  ^bb0(%x: tensor<2xf32>):
    "tidal.yield"(%x) : (tensor<2xf32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<5x2xf32>) -> tensor<5x3xf32>
  return %r : tensor<5x3xf32>
}

// -----

func.func @map_scalar_xs(%x: tensor<f32>) -> tensor<f32> {
  // expected-error@+1 {{'tidal.map' op dim = 0 is out of range for operand #0 (xs[0]) of type tensor<f32> (rank 0)}}
  %r = "tidal.map"(%x) ({
  ^bb0(%a: tensor<f32>):
    "tidal.yield"(%a) : (tensor<f32>) -> ()
  }) {num_xs = 1 : i64} : (tensor<f32>) -> tensor<f32>
  return %r : tensor<f32>
}

// -----

func.func @not_isolated(%p: tensor<i1>, %x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    // expected-error@+1 {{'arith.addf' op operand #1 uses a value defined outside the enclosing 'tidal.cond': tidal regions are isolated from above}}
    %s = arith.addf %a, %y : tensor<4xf32>
    "tidal.yield"(%s) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @yield_outside(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.yield' op must terminate a region of a tidal op (tidal.associative_scan, tidal.cond, tidal.map, tidal.scan, tidal.while), but its parent is 'func.func'}}
  "tidal.yield"(%x) : (tensor<4xf32>) -> ()
  return %x : tensor<4xf32>
}

// -----

func.func @yield_not_last(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %r = "tidal.cond"(%p, %x) ({
  ^bb0(%a: tensor<4xf32>):
    // expected-error@+1 {{'tidal.yield' op must be the last operation in its block}}
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }, {
  ^bb0(%a: tensor<4xf32>):
    "tidal.yield"(%a) : (tensor<4xf32>) -> ()
  }) : (tensor<i1>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @unknown_tidal_op(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{unknown tidal op 'tidal.loop'}}
  %r = "tidal.loop"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @aten_call_unqualified(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.aten_call' op callee 'sort' must be a qualified operator name such as 'aten::convolution'}}
  %r = "tidal.aten_call"(%x) {callee = "sort", overload = "", args = [0 : index]} : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @aten_call_unreferenced_operand(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.aten_call' op args must refer to each of its 2 operand(s) exactly once, got references [0]}}
  %r = "tidal.aten_call"(%x, %y) {callee = "aten::neg", overload = "", args = [0 : index]} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @aten_call_missing_args(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'tidal.aten_call' op requires array attribute 'args' (the operator's schema arguments)}}
  %r = "tidal.aten_call"(%x) {callee = "aten::neg", overload = ""} : (tensor<4xf32>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}
