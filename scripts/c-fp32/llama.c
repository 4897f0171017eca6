// llama.c: a plain C fp32 Llama decoder in the style of llama2.c's run.c
// (one file, OpenMP over matrix rows and attention heads), reading the F32
// GGUF files that internal/cmd/gguf writes. It is the reference Gearbox's
// float32 single-stream decode is timed against (scripts/c-fp32-compare);
// see README.md. Not part of the Go build.
//
//   gcc -O3 -march=native -fopenmp -o llama llama.c -lm
//   OMP_NUM_THREADS=2 ./llama MODEL.gguf STEPS IDS [MODEL.safetensors]
//
// With MODEL.safetensors (the Hugging Face checkpoint the GGUF was written
// from, one file) the weights are read from it instead, q and k in its
// half-split RoPE layout; the GGUF still gives the configuration and
// Llama 3's rope_freqs. Gearbox maps that same file, so both programs then
// read the same page-cache pages: where the kernel placed a file's pages
// moves a memory-bound decode by several percent (docs/performance.md).
//
// IDS is the prompt as comma-separated token ids; the prompt is fed one
// token at a time (as run.c does), then STEPS tokens are generated
// greedily. Prints the decode rate (tokens after the first over the time
// from the first generated token to the last, as gearbox generate reports
// it), that time per token split into the matmuls and everything else,
// and the generated ids.
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
	int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, head_dim, seq_len;
	float rope_theta, eps;
} Config;

typedef struct {
	float *token_embd, *output_norm, *output, *rope_freqs;
	float **attn_norm, **wq, **wk, **wv, **wo, **ffn_norm, **w1, **w2, **w3;
} Weights;

typedef struct {
	float *x, *xb, *xb2, *hb, *hb2, *q, *att, *logits, *key_cache, *value_cache;
} State;

static void die(const char *msg, const char *arg) {
	fprintf(stderr, "llama: %s%s\n", msg, arg ? arg : "");
	exit(1);
}

// ---------------------------------------------------------------- GGUF

typedef struct {
	const uint8_t *p, *end;
} Cursor;

static const uint8_t *take(Cursor *c, size_t n) {
	if ((size_t)(c->end - c->p) < n) die("truncated GGUF header", NULL);
	const uint8_t *q = c->p;
	c->p += n;
	return q;
}
static uint32_t u32(Cursor *c) { uint32_t v; memcpy(&v, take(c, 4), 4); return v; }
static uint64_t u64(Cursor *c) { uint64_t v; memcpy(&v, take(c, 8), 8); return v; }

// value reads one metadata value of type t; numbers come back as double,
// strings and arrays are skipped.
static double value(Cursor *c, uint32_t t) {
	switch (t) {
	case 0: case 1: case 7: return (double)*take(c, 1);
	case 2: case 3: { uint16_t v; memcpy(&v, take(c, 2), 2); return v; }
	case 4: return u32(c);
	case 5: return (int32_t)u32(c);
	case 6: { float f; memcpy(&f, take(c, 4), 4); return f; }
	case 8: take(c, u64(c)); return 0;
	case 9: {
		uint32_t et = u32(c);
		uint64_t n = u64(c);
		for (uint64_t i = 0; i < n; i++) value(c, et);
		return 0;
	}
	case 10: return (double)u64(c);
	case 11: return (double)(int64_t)u64(c);
	case 12: { double d; memcpy(&d, take(c, 8), 8); return d; }
	}
	die("unknown GGUF value type", NULL);
	return 0;
}

typedef struct {
	char name[80];
	uint64_t offset, n;
	uint32_t type;
} TensorInfo;

// Table is an index of a file's tensors: the GGUF's, or the safetensors
// checkpoint's.
typedef struct {
	TensorInfo *t;
	uint64_t n;
	const uint8_t *data;
} Table;

static Table gguf_table, hf_table;

// lookup returns the F32 tensor name of tab with want elements (any
// number if 0), or NULL when it is missing and not required.
static float *lookup(const Table *tab, const char *name, uint64_t want, int required) {
	for (uint64_t i = 0; i < tab->n; i++) {
		if (strcmp(tab->t[i].name, name) == 0) {
			if (tab->t[i].type != 0) die("not an F32 tensor (for a GGUF: convert with gguf -type f32): ", name);
			if (want && tab->t[i].n != want) die("unexpected size of ", name);
			return (float *)(tab->data + tab->t[i].offset);
		}
	}
	if (required) die("missing tensor ", name);
	return NULL;
}

// point sets w's tensors to tab's: the embedding, final norm and output
// (tied to the embedding when absent) named by globals, and per layer the
// parts names[0..8], in Weights order, named by fmt (with the layer and
// the part's name).
static void point(const Table *tab, const Config *p, Weights *w, const char *const globals[3], const char *fmt, const char *const names[9]) {
	int d = p->dim, kv = p->n_kv_heads * p->head_dim, h = p->hidden_dim;
	w->token_embd = lookup(tab, globals[0], (uint64_t)p->vocab_size * d, 1);
	w->output_norm = lookup(tab, globals[1], d, 1);
	w->output = lookup(tab, globals[2], (uint64_t)p->vocab_size * d, 0);
	if (!w->output) w->output = w->token_embd; // tied
	float **slots[] = {w->attn_norm, w->wq, w->wk, w->wv, w->wo, w->ffn_norm, w->w1, w->w2, w->w3};
	uint64_t sizes[] = {d, (uint64_t)d * d, (uint64_t)kv * d, (uint64_t)kv * d, (uint64_t)d * d, d, (uint64_t)h * d, (uint64_t)h * d, (uint64_t)h * d};
	for (int s = 0; s < 9; s++) {
		for (int l = 0; l < p->n_layers; l++) {
			char name[96];
			snprintf(name, sizeof name, fmt, l, names[s]);
			slots[s][l] = lookup(tab, name, sizes[s], 1);
		}
	}
}

// map_file maps path read-only and prefaulted with mmap flags (advised
// MADV_HUGEPAGE with huge) and sets *size.
static const uint8_t *map_file(const char *path, int flags, int huge, size_t *size) {
	int fd = open(path, O_RDONLY);
	if (fd < 0) die("cannot open ", path);
	struct stat st;
	fstat(fd, &st);
	const uint8_t *base = mmap(NULL, st.st_size, PROT_READ, flags | MAP_POPULATE, fd, 0);
	if (base == MAP_FAILED) die("mmap failed: ", path);
	if (huge) madvise((void *)base, st.st_size, MADV_HUGEPAGE);
	*size = st.st_size;
	return base;
}

static void load(const char *path, Config *p, Weights *w) {
	size_t size;
	const uint8_t *base = map_file(path, MAP_PRIVATE, 0, &size);
	Cursor c = {base, base + size};
	if (memcmp(take(&c, 4), "GGUF", 4) != 0) die("not a GGUF file: ", path);
	if (u32(&c) != 3) die("not GGUF version 3: ", path);
	uint64_t n_tensors = u64(&c);
	uint64_t n_kv = u64(&c);
	uint64_t alignment = 32;
	memset(p, 0, sizeof *p);
	p->rope_theta = 10000;
	p->eps = 1e-5f;
	for (uint64_t i = 0; i < n_kv; i++) {
		uint64_t len = u64(&c);
		char key[256] = {0};
		const uint8_t *k = take(&c, len);
		memcpy(key, k, len < 255 ? len : 255);
		double v = value(&c, u32(&c));
		if (!strcmp(key, "general.alignment")) alignment = (uint64_t)v;
		else if (!strcmp(key, "llama.embedding_length")) p->dim = (int)v;
		else if (!strcmp(key, "llama.feed_forward_length")) p->hidden_dim = (int)v;
		else if (!strcmp(key, "llama.block_count")) p->n_layers = (int)v;
		else if (!strcmp(key, "llama.attention.head_count")) p->n_heads = (int)v;
		else if (!strcmp(key, "llama.attention.head_count_kv")) p->n_kv_heads = (int)v;
		else if (!strcmp(key, "llama.vocab_size")) p->vocab_size = (int)v;
		else if (!strcmp(key, "llama.rope.dimension_count")) p->head_dim = (int)v;
		else if (!strcmp(key, "llama.context_length")) p->seq_len = (int)v;
		else if (!strcmp(key, "llama.rope.freq_base")) p->rope_theta = (float)v;
		else if (!strcmp(key, "llama.attention.layer_norm_rms_epsilon")) p->eps = (float)v;
	}
	TensorInfo *tensors = calloc(n_tensors, sizeof *tensors);
	for (uint64_t i = 0; i < n_tensors; i++) {
		uint64_t len = u64(&c);
		const uint8_t *name = take(&c, len);
		memcpy(tensors[i].name, name, len < 79 ? len : 79);
		uint32_t nd = u32(&c);
		tensors[i].n = 1;
		for (uint32_t d = 0; d < nd; d++) tensors[i].n *= u64(&c);
		tensors[i].type = u32(&c);
		tensors[i].offset = u64(&c);
	}
	uint64_t pos = (uint64_t)(c.p - base);
	gguf_table = (Table){tensors, n_tensors, base + (pos + alignment - 1) / alignment * alignment};
	if (!p->n_kv_heads) p->n_kv_heads = p->n_heads;
	if (!p->head_dim) p->head_dim = p->dim / p->n_heads;
	if (p->head_dim * p->n_heads != p->dim) die("head_dim · heads != dim is not supported", NULL);

	w->rope_freqs = lookup(&gguf_table, "rope_freqs.weight", p->head_dim / 2, 0);
	float ***slots[] = {&w->attn_norm, &w->wq, &w->wk, &w->wv, &w->wo, &w->ffn_norm, &w->w1, &w->w2, &w->w3};
	for (int s = 0; s < 9; s++) *slots[s] = calloc(p->n_layers, sizeof(float *));
	const char *const globals[] = {"token_embd.weight", "output_norm.weight", "output.weight"};
	const char *const names[] = {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_down", "ffn_up"};
	point(&gguf_table, p, w, globals, "blk.%d.%s.weight", names);
}

// ---------------------------------------------------------- safetensors

static const char *skip_ws(const char *p) {
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
	return p;
}

static const char *skip_string(const char *p) { // p at the opening quote
	for (p++; *p && *p != '"'; p++)
		if (*p == '\\' && p[1]) p++;
	if (!*p) die("bad safetensors header", NULL);
	return p + 1;
}

static const char *skip_value(const char *p) {
	p = skip_ws(p);
	if (*p == '"') return skip_string(p);
	if (*p == '{' || *p == '[') {
		int depth = 0;
		do {
			if (*p == '"') {
				p = skip_string(p);
				continue;
			}
			if (!*p) die("bad safetensors header", NULL);
			if (*p == '{' || *p == '[') depth++;
			else if (*p == '}' || *p == ']') depth--;
			p++;
		} while (depth > 0);
		return p;
	}
	while (*p && *p != ',' && *p != '}' && *p != ']') p++;
	return p;
}

// field finds "key": inside [p, end) and returns what follows the colon.
static const char *field(const char *p, const char *end, const char *key) {
	size_t n = strlen(key);
	for (; p + n + 2 < end; p++)
		if (*p == '"' && !strncmp(p + 1, key, n) && p[n + 1] == '"') return skip_ws(strchr(p + n + 2, ':') + 1);
	return NULL;
}

// load_safetensors maps path as Gearbox does (read-only, shared, advised
// for huge pages) and indexes its tensors.
static void load_safetensors(const char *path) {
	size_t size;
	const uint8_t *base = map_file(path, MAP_SHARED, 1, &size);
	uint64_t n;
	if (size < 8) die("bad safetensors header: ", path);
	memcpy(&n, base, 8);
	if (n > size - 8) die("bad safetensors header: ", path);
	char *json = malloc(n + 1);
	memcpy(json, base + 8, n);
	json[n] = 0;
	TensorInfo *hf = calloc(n / 16 + 1, sizeof *hf); // every entry takes more than 16 bytes
	uint64_t n_hf = 0;
	const char *p = skip_ws(json);
	if (*p++ != '{') die("bad safetensors header: ", path);
	for (p = skip_ws(p); *p == '"'; p = skip_ws(p)) {
		const char *key = p + 1, *key_end = skip_string(p) - 1;
		p = skip_ws(key_end + 1);
		if (*p++ != ':') die("bad safetensors header: ", path);
		const char *v = skip_ws(p), *v_end = skip_value(v);
		if (strncmp(key, "__metadata__", key_end - key)) {
			TensorInfo *t = &hf[n_hf++];
			memcpy(t->name, key, key_end - key < 79 ? key_end - key : 79);
			const char *dt = field(v, v_end, "dtype"), *off = field(v, v_end, "data_offsets");
			if (!dt || !off || *off != '[') die("tensor without dtype or data_offsets: ", t->name);
			t->type = strncmp(dt, "\"F32\"", 5) != 0;
			char *e;
			uint64_t lo = strtoull(off + 1, &e, 10), hi = strtoull(strchr(e, ',') + 1, NULL, 10);
			t->offset = lo;
			t->n = (hi - lo) / 4;
		}
		p = skip_ws(v_end);
		if (*p == ',') p++;
	}
	free(json);
	hf_table = (Table){hf, n_hf, base + 8 + n};
}

// use_safetensors points w at the checkpoint's tensors.
static void use_safetensors(const char *path, const Config *p, Weights *w) {
	load_safetensors(path);
	const char *const globals[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
	const char *const names[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
	                             "post_attention_layernorm", "mlp.gate_proj", "mlp.down_proj", "mlp.up_proj"};
	point(&hf_table, p, w, globals, "model.layers.%d.%s.weight", names);
}

// ------------------------------------------------------------- forward

static void rmsnorm(float *o, const float *x, const float *weight, int size, float eps) {
	float ss = 0;
	for (int j = 0; j < size; j++) ss += x[j] * x[j];
	ss = 1.0f / sqrtf(ss / size + eps);
	for (int j = 0; j < size; j++) o[j] = weight[j] * (ss * x[j]);
}

static void softmax(float *x, int size) {
	float max_val = x[0];
	for (int i = 1; i < size; i++) if (x[i] > max_val) max_val = x[i];
	float sum = 0;
	for (int i = 0; i < size; i++) { x[i] = expf(x[i] - max_val); sum += x[i]; }
	for (int i = 0; i < size; i++) x[i] /= sum;
}

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static double t_matmul; // seconds spent in matmul

// matmul: W (d,n) @ x (n,) -> xout (d,), rows split over the threads; the
// dot product vectorizes through the simd reduction (no -ffast-math).
static void matmul(float *xout, const float *x, const float *w, int n, int d) {
	double t0 = now();
	int i;
#pragma omp parallel for private(i)
	for (i = 0; i < d; i++) {
		const float *row = w + (size_t)i * n;
		float val = 0.0f;
#pragma omp simd reduction(+ : val)
		for (int j = 0; j < n; j++) val += row[j] * x[j];
		xout[i] = val;
	}
	t_matmul += now() - t0;
}

static float *forward(const Config *p, const Weights *w, State *s, int token, int pos) {
	int dim = p->dim, hd = p->head_dim, kv_dim = p->n_kv_heads * hd, kv_mul = p->n_heads / p->n_kv_heads;
	int hidden = p->hidden_dim;
	float *x = s->x;
	memcpy(x, w->token_embd + (size_t)token * dim, dim * sizeof *x);
	for (int l = 0; l < p->n_layers; l++) {
		rmsnorm(s->xb, x, w->attn_norm[l], dim, p->eps);
		size_t loff = (size_t)l * p->seq_len * kv_dim;
		float *k = s->key_cache + loff + (size_t)pos * kv_dim;
		float *v = s->value_cache + loff + (size_t)pos * kv_dim;
		matmul(s->q, s->xb, w->wq[l], dim, dim);
		matmul(k, s->xb, w->wk[l], dim, kv_dim);
		matmul(v, s->xb, w->wv[l], dim, kv_dim);
		// RoPE: on pairs (j, j + hd/2) of each head in the Hugging Face
		// layout, on interleaved pairs in GGUF's.
		for (int i = 0; hf_table.n && i < dim; i += hd) {
			for (int j = 0; j < hd / 2; j++) {
				float freq = 1.0f / powf(p->rope_theta, 2 * j / (float)hd);
				if (w->rope_freqs) freq /= w->rope_freqs[j];
				float val = pos * freq, fcr = cosf(val), fci = sinf(val);
				int rotn = i < kv_dim ? 2 : 1;
				for (int r = 0; r < rotn; r++) {
					float *vec = r == 0 ? s->q : k;
					float v0 = vec[i + j], v1 = vec[i + j + hd / 2];
					vec[i + j] = v0 * fcr - v1 * fci;
					vec[i + j + hd / 2] = v0 * fci + v1 * fcr;
				}
			}
		}
		for (int i = 0; !hf_table.n && i < dim; i += 2) {
			int j = i % hd;
			float freq = 1.0f / powf(p->rope_theta, j / (float)hd);
			if (w->rope_freqs) freq /= w->rope_freqs[j / 2];
			float val = pos * freq, fcr = cosf(val), fci = sinf(val);
			int rotn = i < kv_dim ? 2 : 1;
			for (int r = 0; r < rotn; r++) {
				float *vec = r == 0 ? s->q : k;
				float v0 = vec[i], v1 = vec[i + 1];
				vec[i] = v0 * fcr - v1 * fci;
				vec[i + 1] = v0 * fci + v1 * fcr;
			}
		}
		int h;
#pragma omp parallel for private(h)
		for (h = 0; h < p->n_heads; h++) {
			float *q = s->q + h * hd, *att = s->att + (size_t)h * p->seq_len;
			for (int t = 0; t <= pos; t++) {
				const float *kt = s->key_cache + loff + (size_t)t * kv_dim + (h / kv_mul) * hd;
				float score = 0;
				for (int i = 0; i < hd; i++) score += q[i] * kt[i];
				att[t] = score / sqrtf((float)hd);
			}
			softmax(att, pos + 1);
			float *xb = s->xb + h * hd;
			memset(xb, 0, hd * sizeof *xb);
			for (int t = 0; t <= pos; t++) {
				const float *vt = s->value_cache + loff + (size_t)t * kv_dim + (h / kv_mul) * hd;
				for (int i = 0; i < hd; i++) xb[i] += att[t] * vt[i];
			}
		}
		matmul(s->xb2, s->xb, w->wo[l], dim, dim);
		for (int i = 0; i < dim; i++) x[i] += s->xb2[i];
		rmsnorm(s->xb, x, w->ffn_norm[l], dim, p->eps);
		matmul(s->hb, s->xb, w->w1[l], dim, hidden);
		matmul(s->hb2, s->xb, w->w3[l], dim, hidden);
		for (int i = 0; i < hidden; i++) {
			float val = s->hb[i];
			s->hb[i] = val * (1.0f / (1.0f + expf(-val))) * s->hb2[i];
		}
		matmul(s->xb, s->hb, w->w2[l], hidden, dim);
		for (int i = 0; i < dim; i++) x[i] += s->xb[i];
	}
	rmsnorm(x, x, w->output_norm, dim, p->eps);
	matmul(s->logits, x, w->output, dim, p->vocab_size);
	return s->logits;
}

static int argmax(const float *v, int n) {
	int best = 0;
	for (int i = 1; i < n; i++) if (v[i] > v[best]) best = i;
	return best;
}

int main(int argc, char **argv) {
	if (argc != 4 && argc != 5) die("usage: llama MODEL.gguf STEPS IDS [MODEL.safetensors]", NULL);
	Config p;
	Weights w;
	load(argv[1], &p, &w);
	if (argc == 5) use_safetensors(argv[4], &p, &w);
	int steps = atoi(argv[2]);
	int prompt[4096], n_prompt = 0;
	for (char *tok = strtok(argv[3], ","); tok && n_prompt < 4096; tok = strtok(NULL, ",")) prompt[n_prompt++] = atoi(tok);
	if (n_prompt == 0 || steps < 1) die("need a prompt and at least one step", NULL);
	int max_len = n_prompt + steps;
	if (p.seq_len <= 0 || p.seq_len > max_len) p.seq_len = max_len;
	int kv_dim = p.n_kv_heads * p.head_dim;
	State s = {
		.x = calloc(p.dim, 4), .xb = calloc(p.dim, 4), .xb2 = calloc(p.dim, 4),
		.hb = calloc(p.hidden_dim, 4), .hb2 = calloc(p.hidden_dim, 4), .q = calloc(p.dim, 4),
		.att = calloc((size_t)p.n_heads * p.seq_len, 4), .logits = calloc(p.vocab_size, 4),
		.key_cache = calloc((size_t)p.n_layers * p.seq_len * kv_dim, 4),
		.value_cache = calloc((size_t)p.n_layers * p.seq_len * kv_dim, 4),
	};
	int *out = malloc(steps * sizeof(int));
	int pos = 0, token = prompt[0], n_out = 0;
	double t_first = 0;
	while (n_out < steps) {
		float *logits = forward(&p, &w, &s, token, pos);
		pos++;
		if (pos < n_prompt) {
			token = prompt[pos];
			continue;
		}
		token = argmax(logits, p.vocab_size);
		out[n_out++] = token;
		if (n_out == 1) {
			t_first = now();
			t_matmul = 0;
		}
	}
	double total = now() - t_first;
	double rate = steps > 1 ? (steps - 1) / total : 0;
	fprintf(stderr, "llama: dim %d, hidden %d, %d layers, %d/%d heads, vocab %d\n", p.dim, p.hidden_dim, p.n_layers, p.n_heads, p.n_kv_heads, p.vocab_size);
	double per = steps > 1 ? 1e3 / (steps - 1) : 0;
	printf("%d prompt tokens, %d completion tokens (%.2f tok/s); matmul %.3f ms/token, other %.3f ms/token\n", n_prompt, n_out, rate,
	       t_matmul * per, (total - t_matmul) * per);
	for (int i = 0; i < n_out; i++) printf("%d%c", out[i], i + 1 < n_out ? ' ' : '\n');
	return 0;
}
