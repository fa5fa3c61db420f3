/* libFuzzer target for the model loader: any bytes as a model file. load_model() must reject
 * them with an error (returned: a die() here would be an exit, which libFuzzer reports) or
 * accept them; an accepted file
 * with a small enough context then runs one forward pass, so that AddressSanitizer sees every
 * weight read the loader allowed. Built and run by `make fuzz`. */
#define FUZZING /* load.h: a wrong checksum is let through, so that mutations reach the checks after it */
#include "../../engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static Transformer t;
    /* the loader relies on the file starting 64-byte aligned, as mmap gives it */
    uint8_t *buf = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
    memcpy(buf, data, size);
    memset(&t, 0, sizeof t);
    Error e;
    if (load_model(&t, buf, size, &e)) {
        const Config *c = &t.config;
        uint64_t cache = (uint64_t)c->n_layer * (uint64_t)c->n_ctx * (uint64_t)c->n_embd;
        if (c->n_layer > 0 && cache < (1u << 22) && (uint64_t)c->n_ctx * c->n_embd < (1u << 22) &&
            build_run(&t, 1, CACHE_F16, &e) && reserve_kv_cache(&t, 1, &e)) {
            uint32_t token = (uint32_t)c->vocab_size - 1;
            forward(&t, &token, 1, in_sequence(0, 0), 0);
        }
    }
    free_transformer(&t); /* whatever was built, also after a refusal part-way */
    free(buf);
    return 0;
}
