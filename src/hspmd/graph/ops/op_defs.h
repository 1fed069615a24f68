// Internal to the graph layer: the registry entries, one function per op kind, defined one op
// family per file in this folder, plus the shape-rule checks they share. build_standard_registry
// (op_registry.cc) is the only caller of the *_def functions.
#pragma once

#include <string>

#include "hspmd/graph/op_registry.h"

namespace hspmd::graph::detail {

OpDef placeholder_def();    // leaves.cc
OpDef parameter_def();      // leaves.cc
OpDef full_def();           // leaves.cc
OpDef embedding_def();      // embedding.cc
OpDef embedding_bwd_def();  // embedding.cc
OpDef rms_norm_def();       // rms_norm.cc
OpDef rms_norm_bwd_def();   // rms_norm.cc
OpDef matmul_def();         // matmul.cc
OpDef rope_def();           // rope.cc
OpDef rope_bwd_def();       // rope.cc
OpDef attention_def();      // attention.cc
OpDef attention_bwd_def();  // attention.cc
OpDef swiglu_def();         // elementwise.cc
OpDef swiglu_bwd_def();     // elementwise.cc
OpDef add_def();            // elementwise.cc
OpDef reshape_def();        // reshape.cc
OpDef reshard_def();        // reshape.cc
OpDef cross_entropy_def();      // cross_entropy.cc
OpDef cross_entropy_bwd_def();  // cross_entropy.cc

// Shape-rule checks: throw Error prefixed with ctx.where() and naming the input.
void expect_rank(const ShapeContext& ctx, int input, int rank);
void expect_floating(const ShapeContext& ctx, int input);
void expect_integer(const ShapeContext& ctx, int input);
void expect_same_dtype(const ShapeContext& ctx, int a, int b);
void expect_same_shape(const ShapeContext& ctx, int a, int b);
// Input a's dim da equals input b's dim db (structurally, after simplification).
void expect_dim_eq(const ShapeContext& ctx, int a, int da, int b, int db);

}  // namespace hspmd::graph::detail
