/* kernels/arch.h: the instruction-set family this build compiles kernels for, and the one
 * fallback map from the names the kernels call to the definitions that serve them.
 *
 * Every kernel has a portable definition in C, named NAME_generic, in the file of its operation
 * or weight format (kernels/quant.h, f32.h, q8_0.h, ...). A family's own versions live in its
 * directory, one file per operation or format: kernels/x86/ (AVX2 with FMA and F16C; AVX-VNNI,
 * AVX-512 VNNI and AMX where the compiler targets them) and kernels/arm/ (AArch64 NEON, with
 * the dot-product instructions where targeted). What a family does not provide falls back to
 * the portable definition, here, by name; a build for neither family (portable C) uses the
 * portable definitions throughout. Every definition of a kernel computes the same bits
 * (kernels/simd.h), so the map decides only speed. A portable definition that some family
 * replaces is marked __attribute__((unused)): in that family's build nothing calls it.
 *
 * Adding a weight format: its portable file (definitions and its record), one file per family
 * with what that family does faster, and its lines below.
 */
#ifndef KERNELS_ARCH_H
#define KERNELS_ARCH_H

#if defined(__AVX2__) && defined(__FMA__)
#define KERNELS_X86 1
#define KERNELS_FAMILY "x86"
#elif defined(__ARM_NEON) && defined(__aarch64__)
#define KERNELS_ARM 1
#define KERNELS_FAMILY "arm"
#else
#define KERNELS_FAMILY "portable C"
#endif

/* ---- the fallback map ---------------------------------------------------------------------- */


#if defined(KERNELS_X86)
/* x86 multiplies quantized weights from panels rearranged at load, never group by group, and
 * has AVX-512's forms of a prompt's attention and of the float32 transpose only with AVX-512. */
#define q8_0_group_dot q8_0_group_dot_generic
#define q4_0_group_dot q4_0_group_dot_generic
#define q5_0_group_dot q5_0_group_dot_generic
#define q5_1_group_dot q5_1_group_dot_generic
#define q4_k_block_dots q4_k_block_dots_generic
#define q5_k_block_dots q5_k_block_dots_generic
#define q6_k_block_dots q6_k_block_dots_generic
#define q5_1_packed_matmul q5_1_matmul_generic
#define q5_1_packed_bytes q5_1_packed_bytes_generic
#define q5_1_pack q5_1_pack_generic
#define q5_1_describe q5_1_describe_generic
#if !defined(__F16C__) && !defined(__AVX512F__) /* the block formats' panels keep d as binary16 */
#define q5_0_packed_matmul q5_0_matmul_generic
#define q5_0_packed_bytes q5_0_packed_bytes_generic
#define q5_0_pack q5_0_pack_generic
#define q5_0_describe q5_0_describe_generic
#define q4_k_packed_matmul q4_k_matmul_generic
#define q4_k_packed_bytes q4_k_packed_bytes_generic
#define q4_k_pack q4_k_pack_generic
#define q4_k_describe q4_k_describe_generic
#endif
#define q5_k_packed_matmul q5_k_matmul_generic
#define q5_k_packed_bytes q5_k_packed_bytes_generic
#define q5_k_pack q5_k_pack_generic
#define q5_k_describe q5_k_describe_generic
#if !defined(__F16C__) && !defined(__AVX512F__)
#define q6_k_packed_matmul q6_k_matmul_generic
#define q6_k_packed_bytes q6_k_packed_bytes_generic
#define q6_k_pack q6_k_pack_generic
#define q6_k_describe q6_k_describe_generic
#endif
#if !defined(__AVX512F__)
#define f32_transpose_blocks f32_transpose_blocks_generic
#define attention_tile16 attention_tile16_generic
#if !defined(__F16C__)
#define vf_load_f16 vf_load_f16_generic
#define f16_store_vectors f16_store_vectors_generic
#endif
#endif

#elif defined(KERNELS_ARM)
/* ARM reads quantized weights row by row from the file's layout (its own group dot products,
 * no copy at load), and takes q8_0 keys' dot products in vectors only with sdot. */
#define q8_0_packed_matmul q8_0_matmul_generic
#define q8_0_packed_bytes q8_0_packed_bytes_generic
#define q8_0_pack q8_0_pack_generic
#define q4_0_packed_matmul q4_0_matmul_generic
#define q4_0_packed_bytes q4_0_packed_bytes_generic
#define q4_0_pack q4_0_pack_generic
#define q5_0_packed_matmul q5_0_matmul_generic
#define q5_0_packed_bytes q5_0_packed_bytes_generic
#define q5_0_pack q5_0_pack_generic
#define q5_1_packed_matmul q5_1_matmul_generic
#define q5_1_packed_bytes q5_1_packed_bytes_generic
#define q5_1_pack q5_1_pack_generic
#define q4_k_packed_matmul q4_k_matmul_generic
#define q4_k_packed_bytes q4_k_packed_bytes_generic
#define q4_k_pack q4_k_pack_generic
#define q5_k_packed_matmul q5_k_matmul_generic
#define q5_k_packed_bytes q5_k_packed_bytes_generic
#define q5_k_pack q5_k_pack_generic
#define q6_k_packed_matmul q6_k_matmul_generic
#define q6_k_packed_bytes q6_k_packed_bytes_generic
#define q6_k_pack q6_k_pack_generic
#define f32_transpose_blocks f32_transpose_blocks_generic
#define attention_tile16 attention_tile16_generic
#if !defined(__ARM_FEATURE_DOTPROD)
#define key_dots key_dots_generic
#endif

#else
/* portable C: every kernel */
#define quantize_group quantize_group_generic
#define vf_load_f16 vf_load_f16_generic
#define f16_store_vectors f16_store_vectors_generic
#define f32_tile f32_tile_generic
#define f32_transpose_blocks f32_transpose_blocks_generic
#define f32_describe f32_describe_generic
#define q8_0_group_dot q8_0_group_dot_generic
#define q8_0_packed_matmul q8_0_matmul_generic
#define q8_0_packed_bytes q8_0_packed_bytes_generic
#define q8_0_pack q8_0_pack_generic
#define q8_0_describe q8_0_describe_generic
#define q4_0_group_dot q4_0_group_dot_generic
#define q4_0_packed_matmul q4_0_matmul_generic
#define q4_0_packed_bytes q4_0_packed_bytes_generic
#define q4_0_pack q4_0_pack_generic
#define q4_0_describe q4_0_describe_generic
#define q5_0_group_dot q5_0_group_dot_generic
#define q5_1_group_dot q5_1_group_dot_generic
#define q4_k_block_dots q4_k_block_dots_generic
#define q5_k_block_dots q5_k_block_dots_generic
#define q6_k_block_dots q6_k_block_dots_generic
#define q5_0_packed_matmul q5_0_matmul_generic
#define q5_0_packed_bytes q5_0_packed_bytes_generic
#define q5_0_pack q5_0_pack_generic
#define q5_0_describe q5_0_describe_generic
#define q5_1_packed_matmul q5_1_matmul_generic
#define q5_1_packed_bytes q5_1_packed_bytes_generic
#define q5_1_pack q5_1_pack_generic
#define q5_1_describe q5_1_describe_generic
#define q4_k_packed_matmul q4_k_matmul_generic
#define q4_k_packed_bytes q4_k_packed_bytes_generic
#define q4_k_pack q4_k_pack_generic
#define q4_k_describe q4_k_describe_generic
#define q5_k_packed_matmul q5_k_matmul_generic
#define q5_k_packed_bytes q5_k_packed_bytes_generic
#define q5_k_pack q5_k_pack_generic
#define q5_k_describe q5_k_describe_generic
#define q6_k_packed_matmul q6_k_matmul_generic
#define q6_k_packed_bytes q6_k_packed_bytes_generic
#define q6_k_pack q6_k_pack_generic
#define q6_k_describe q6_k_describe_generic
#define key_dots key_dots_generic
#define attention_tile16 attention_tile16_generic
#endif

#endif
