package cudaexec

import (
	"embed"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"

	"github.com/gearboxlm/gearbox/gpu"
	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/model"
)

//go:embed kernels/*.cu
var kernelFS embed.FS

// kernelFiles is the order in which KernelSource concatenates the embedded
// files: common.cu defines what the others use.
var kernelFiles = []string{"common.cu", "elementwise.cu", "norm.cu", "attention.cu", "attention_mma.cu"}

var kernelSource = sync.OnceValue(func() string {
	var b strings.Builder
	for _, name := range kernelFiles {
		data, err := kernelFS.ReadFile("kernels/" + name)
		if err != nil {
			panic("cudaexec: embedded kernel file missing: " + err.Error())
		}
		// #line makes NVRTC's messages name the file and line.
		fmt.Fprintf(&b, "#line 1 %q\n", name)
		b.Write(data)
		if len(data) > 0 && data[len(data)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.String()
})

// KernelSource returns the concatenated CUDA C source (the embedded files
// under kernels/) compiled by LoadKernels.
func KernelSource() string { return kernelSource() }

// KernelOptions are the NVRTC options LoadKernels passes besides the
// architecture and the dtype selection (-DGB_ONLY_<DTYPE>, which
// instantiates one element type only). --use_fast_math is left out on
// purpose: it would turn expf, division and rsqrtf into approximations and
// flush denormals; the attention kernels call exp2f themselves where speed
// matters, and that is accurate to 2 ulp without it.
func KernelOptions() []string {
	return []string{"-default-device", "--std=c++17"}
}

// compileOptions are KernelOptions plus the define that builds dt's
// kernels only (see common.cu).
func compileOptions(dt model.DType) ([]string, error) {
	sfx, err := dtypeSuffix(dt)
	if err != nil {
		return nil, err
	}
	return append(KernelOptions(), "-DGB_ONLY_"+strings.ToUpper(sfx)), nil
}

// namedFunc is one kernel LoadKernels resolves and where it keeps it.
type namedFunc struct {
	name string // without the dtype suffix for typed kernels
	fn   *cuda.Function
}

// typedFuncs are the kernels instantiated per element type, as
// <name>_f32, <name>_f16 and <name>_bf16.
func (k *Kernels) typedFuncs() []namedFunc {
	return []namedFunc{
		{"embed", &k.embed}, {"gather_rows", &k.gather}, {"copy2d", &k.copy2d}, {"silu_mul", &k.silu}, {"add", &k.add},
		{"convert", &k.convert}, {"to_f32", &k.toF32}, {"add_rmsnorm", &k.rmsnorm}, {"qkv_rope", &k.qkv},
		{"attn_decode", &k.decode}, {"attn_decode_narrow", &k.decodeNarrow}, {"attn_merge", &k.merge},
		{"attn_prefill_d128", &k.prefill128}, {"attn_prefill_d256", &k.prefill256},
		{"attn_decode_w2g1", &k.decodeRows[0][0]}, {"attn_decode_w2g4", &k.decodeRows[0][1]}, {"attn_decode_w2g8", &k.decodeRows[0][2]},
		{"attn_decode_w4g1", &k.decodeRows[1][0]}, {"attn_decode_w4g4", &k.decodeRows[1][1]}, {"attn_decode_w4g8", &k.decodeRows[1][2]},
		{"attn_decode_w8g1", &k.decodeRows[2][0]}, {"attn_decode_w8g4", &k.decodeRows[2][1]},
	}
}

// halfFuncs are the kernels instantiated for the 16-bit types only, as
// <name>_f16 and <name>_bf16.
func (k *Kernels) halfFuncs() []namedFunc {
	return []namedFunc{{"attn_prefill_mma_d64", &k.prefillMMA[0]}, {"attn_prefill_mma_d128", &k.prefillMMA[1]}}
}

// funcs are the kernels of k's dtype in entryPoints's order: typed, then
// 16-bit only (when dt is 16-bit), then untyped; typed says how many of
// them carry the dtype suffix.
func (k *Kernels) funcs() (fs []namedFunc, typed int) {
	fs = k.typedFuncs()
	if k.dt.Size() == 2 {
		fs = append(fs, k.halfFuncs()...)
	}
	return append(fs, k.untypedFuncs()...), len(fs)
}

// rowsIndex maps the vector width W (2, 4, 8) and heads per block GB (1,
// 4, 8) of an attn_decode_w<W>g<GB> kernel to its place in decodeRows.
func rowsIndex(w, gb int) (wi, gi int) {
	switch w {
	case 4:
		wi = 1
	case 8:
		wi = 2
	}
	switch gb {
	case 4:
		gi = 1
	case 8:
		gi = 2
	}
	return wi, gi
}

// untypedFuncs are the kernels with one entry point for every dtype.
func (k *Kernels) untypedFuncs() []namedFunc {
	return []namedFunc{{"argmax", &k.argmax}}
}

// dtypeSuffix is the entry-point suffix of dt.
func dtypeSuffix(dt model.DType) (string, error) {
	switch dt {
	case model.Float32:
		return "f32", nil
	case model.Float16:
		return "f16", nil
	case model.BFloat16:
		return "bf16", nil
	}
	return "", fmt.Errorf("cudaexec: kernels: unsupported dtype %v", dt)
}

// entryPoints lists the extern "C" kernel names LoadKernels resolves for
// dt, in the order of typedFuncs then untypedFuncs.
func entryPoints(dt model.DType) ([]string, error) {
	sfx, err := dtypeSuffix(dt)
	if err != nil {
		return nil, err
	}
	k := Kernels{dt: dt}
	fs, typed := k.funcs()
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
		if i < typed {
			names[i] += "_" + sfx
		}
	}
	return names, nil
}

// Kernels is the compiled kernel module of one context for one dtype. Its
// launch methods must be called inside the context's Do; they only queue
// work on the given stream and return errors for bad arguments or failed
// launches, never panic. Launch parameters depend only on the arguments
// (never on device data), so the launches can be captured in CUDA graphs.
type Kernels struct {
	ctx  *cuda.Context
	mod  cuda.Module
	dt   model.DType
	size int // bytes per element of dt
	sms  int

	embed, gather, copy2d, silu, add cuda.Function
	convert, toF32                   cuda.Function
	rmsnorm, qkv                     cuda.Function
	decode, decodeNarrow, merge      cuda.Function
	decodeRows                       [3][3]cuda.Function // [W 2, 4, 8][GB 1, 4, 8]; no W 8 GB 8
	prefill128, prefill256           cuda.Function
	prefillMMA                       [2]cuda.Function // head_dim 64, 128; 16-bit dtypes only
	argmax                           cuda.Function

	// decodeGeneric makes decode use the general kernel for every shape
	// (tests).
	decodeGeneric bool
	// prefillSIMT makes prefill use the SIMT kernels for the 16-bit types
	// too (tests, benchmarks).
	prefillSIMT bool
	// launchHook, when set, receives the launches instead of the device
	// (tests).
	launchHook func(f cuda.Function, grid, block cuda.Dim3, shared int, a *launchArgs) error

	// prefill256Err is why the d > 128 prefill kernel cannot run on this
	// device (it needs about 107 KiB of shared memory per block); nil when
	// it can.
	prefill256Err error
}

// LoadKernels compiles the kernels for ctx's device through
// cuda.CompileCached (cache may be nil), loads the module, resolves every
// entry point for dt and raises the dynamic shared-memory limits of the
// prefill attention kernels. Call inside ctx.Do.
func LoadKernels(ctx *cuda.Context, nv *cuda.NVRTC, cache *gpu.KernelCache, dt model.DType) (*Kernels, error) {
	cc := ctx.Capability()
	if cc.Major < 8 {
		return nil, fmt.Errorf("cudaexec: kernels need compute capability 8.0 or newer, device has %d.%d", cc.Major, cc.Minor)
	}
	opts, err := compileOptions(dt)
	if err != nil {
		return nil, err
	}
	image, err := cuda.CompileCached(nv, cache, "gearbox_kernels.cu", KernelSource(), opts, cc, ctx.DriverVersion())
	if err != nil {
		return nil, fmt.Errorf("cudaexec: compile kernels: %w", err)
	}
	return loadKernelImage(ctx, image, dt)
}

// loadKernelImage is LoadKernels after compilation: it loads image (the
// KernelSource compiled with compileOptions(dt)) and resolves dt's entry
// points.
func loadKernelImage(ctx *cuda.Context, image []byte, dt model.DType) (*Kernels, error) {
	names, err := entryPoints(dt)
	if err != nil {
		return nil, err
	}
	mod, err := ctx.LoadModule(image)
	if err != nil {
		return nil, fmt.Errorf("cudaexec: load kernels: %w", err)
	}
	k := &Kernels{ctx: ctx, mod: mod, dt: dt, size: dt.Size(), sms: max(1, ctx.Multiprocessors())}
	fail := func(err error) (*Kernels, error) {
		return nil, errors.Join(err, ctx.UnloadModule(mod))
	}
	funcs, _ := k.funcs()
	for i, f := range funcs {
		if *f.fn, err = ctx.Function(mod, names[i]); err != nil {
			return fail(fmt.Errorf("cudaexec: %w", err))
		}
	}
	if err := ctx.SetMaxDynamicShared(k.prefill128, prefillShared(128, 64)); err != nil {
		return fail(fmt.Errorf("cudaexec: prefill attention: %w", err))
	}
	if k.size == 2 {
		if err := ctx.SetMaxDynamicShared(k.prefillMMA[1], prefillMMAShared(128)); err != nil {
			return fail(fmt.Errorf("cudaexec: prefill attention: %w", err))
		}
	}
	if err := ctx.SetMaxDynamicShared(k.prefill256, prefillShared(256, 32)); err != nil {
		k.prefill256Err = fmt.Errorf("cudaexec: prefill attention with head_dim > 128 needs %d bytes of shared memory per block: %w", prefillShared(256, 32), err)
	}
	return k, nil
}

// Close unloads the module; k must not be used afterwards. Call inside Do.
func (k *Kernels) Close() error { return k.ctx.UnloadModule(k.mod) }

// DType is the element type the kernels were loaded for.
func (k *Kernels) DType() model.DType { return k.dt }

// launchArgs collects kernel arguments: each pointer points at a fresh
// variable holding one value, as cuda.Context.Launch expects; kinds says
// what each is ('p' pointer, 'i' int, 'l' long long, 'f' float), for the
// tests that check launches against the kernels' signatures.
type launchArgs struct {
	ptrs  []unsafe.Pointer
	kinds []byte
}

func (a *launchArgs) add(p unsafe.Pointer, kind byte) *launchArgs {
	a.ptrs = append(a.ptrs, p)
	a.kinds = append(a.kinds, kind)
	return a
}

func (a *launchArgs) ptr(p cuda.DevicePtr) *launchArgs {
	v := uint64(p)
	return a.add(unsafe.Pointer(&v), 'p')
}

// i32 appends n as a C int; callers check the range with checkInt32 first.
func (a *launchArgs) i32(n int) *launchArgs {
	v := int32(n)
	return a.add(unsafe.Pointer(&v), 'i')
}

func (a *launchArgs) i64(n int64) *launchArgs {
	v := n
	return a.add(unsafe.Pointer(&v), 'l')
}

func (a *launchArgs) f32(f float32) *launchArgs {
	v := f
	return a.add(unsafe.Pointer(&v), 'f')
}

func newLaunchArgs() *launchArgs {
	return &launchArgs{ptrs: make([]unsafe.Pointer, 0, 20), kinds: make([]byte, 0, 20)}
}

func (k *Kernels) launch(what string, f cuda.Function, grid, block cuda.Dim3, shared int, s cuda.Stream, a *launchArgs) error {
	var err error
	if k.launchHook != nil {
		err = k.launchHook(f, grid, block, shared, a)
	} else {
		err = k.ctx.Launch(f, grid, block, shared, s, a.ptrs...)
	}
	if err != nil {
		return fmt.Errorf("cudaexec: %s: %w", what, err)
	}
	return nil
}

// checkInt32 checks that every size is in [0, MaxInt32]; names holds
// their names, separated by spaces.
func checkInt32(what, names string, sizes ...int) error {
	for i, n := range sizes {
		if n < 0 || n > math.MaxInt32 {
			return fmt.Errorf("cudaexec: %s: %s = %d out of range", what, strings.Fields(names)[i], n)
		}
	}
	return nil
}

func divUp(a, b int) int { return (a + b - 1) / b }

func pow2AtLeast(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// ptrAligned reports whether p is a multiple of b bytes; null pointers count
// as aligned (they are never dereferenced).
func ptrAligned(p cuda.DevicePtr, b int) bool { return uintptr(p)%uintptr(b) == 0 }

const gridYMax = 65535

// rowsGrid is the grid of the row-wise kernels: x covers the columns in
// blocks of cols, y strides over the rows.
func rowsGrid(rows, width, cols int) cuda.Dim3 {
	return cuda.Dim3{X: uint32(divUp(width, cols)), Y: uint32(min(rows, gridYMax)), Z: 1}
}

// Embed writes x[i,:] (float32 [n, hidden]) = table[ids[i]-vocabLo, :] for
// ids in [vocabLo, vocabHi), else zeros; table is dt [vocabHi-vocabLo,
// hidden], ids int32 [n].
func (k *Kernels) Embed(s cuda.Stream, x, table, ids cuda.DevicePtr, n, hidden, vocabLo, vocabHi int) error {
	if err := checkInt32("embed", "n hidden vocabLo vocabHi", n, hidden, vocabLo, vocabHi); err != nil {
		return err
	}
	if vocabHi < vocabLo {
		return fmt.Errorf("cudaexec: embed: vocabulary slice [%d, %d)", vocabLo, vocabHi)
	}
	if n == 0 || hidden == 0 {
		return nil
	}
	a := newLaunchArgs().ptr(x).ptr(table).ptr(ids).i32(n).i32(hidden).i32(vocabLo).i32(vocabHi)
	return k.launch("embed", k.embed, rowsGrid(n, hidden, 256), cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s, a)
}

// AddRMSNorm adds delta (dt [n, hidden]) and bias (dt [hidden]) to the
// float32 residual stream resid [n, hidden] when delta is not 0 (bias may
// be 0), then writes out (dt [n, hidden]) = resid · rsqrt(mean(resid²) +
// eps) · weight, row by row.
func (k *Kernels) AddRMSNorm(s cuda.Stream, out, resid, delta, bias, weight cuda.DevicePtr, n, hidden int, eps float32) error {
	if err := checkInt32("add_rmsnorm", "n hidden", n, hidden); err != nil {
		return err
	}
	if n == 0 || hidden == 0 {
		return nil
	}
	v := k.size * 4
	vec := hidden%4 == 0 && ptrAligned(resid, 16) && ptrAligned(out, v) && ptrAligned(delta, v) && ptrAligned(bias, v) && ptrAligned(weight, v)
	threads := min(1024, max(32, pow2AtLeast(divUp(hidden, 8))))
	a := newLaunchArgs().ptr(out).ptr(resid).ptr(delta).ptr(bias).ptr(weight).i32(hidden).f32(eps).i32(flag(vec))
	return k.launch("add_rmsnorm", k.rmsnorm, cuda.Dim3{X: uint32(n), Y: 1, Z: 1}, cuda.Dim3{X: uint32(threads), Y: 1, Z: 1}, 0, s, a)
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// QKVArgs are the arguments of QKVRope. Q is dt [N, Heads, HeadDim]; KCache
// and VCache are one layer of the paged cache, dt [blocks, KVHeads,
// BlockSize, HeadDim]; QKV is dt [N, (Heads+2·KVHeads)·HeadDim] laid out as
// [q heads | k heads | v heads]; Bias is dt [(Heads+2·KVHeads)·HeadDim] or
// 0; QNorm and KNorm are dt [HeadDim] or 0 (per-head RMSNorm weights, with
// Eps); Cos and Sin are float32 [positions, HeadDim/2]; Pos and Slot are
// int32 [N] (a negative slot skips the cache write).
type QKVArgs struct {
	Q, KCache, VCache, QKV, Bias, QNorm, KNorm, Cos, Sin, Pos, Slot cuda.DevicePtr
	N, Heads, KVHeads, HeadDim, BlockSize                           int
	Eps                                                             float32
}

// QKVRope adds the bias to every head of QKV, applies the optional per-head
// RMSNorm and the rotate-half RoPE to the q and k heads, writes the q heads
// to Q and the k and v heads into the cache slots Slot.
func (k *Kernels) QKVRope(s cuda.Stream, a QKVArgs) error {
	if err := checkInt32("qkv_rope", "N Heads KVHeads HeadDim BlockSize", a.N, a.Heads, a.KVHeads, a.HeadDim, a.BlockSize); err != nil {
		return err
	}
	if a.HeadDim <= 0 || a.HeadDim > 256 || a.HeadDim%2 != 0 {
		return fmt.Errorf("cudaexec: qkv_rope: head_dim %d: want an even number in [2, 256]", a.HeadDim)
	}
	if a.Heads <= 0 || a.KVHeads <= 0 || a.BlockSize <= 0 {
		return fmt.Errorf("cudaexec: qkv_rope: heads %d, kv heads %d, block size %d: want positive", a.Heads, a.KVHeads, a.BlockSize)
	}
	th := a.Heads + 2*a.KVHeads
	if divUp(th, 4) > gridYMax {
		return fmt.Errorf("cudaexec: qkv_rope: %d heads: too many", th)
	}
	if a.N == 0 {
		return nil
	}
	p := newLaunchArgs().ptr(a.Q).ptr(a.KCache).ptr(a.VCache).ptr(a.QKV).ptr(a.Bias).ptr(a.QNorm).ptr(a.KNorm).
		ptr(a.Cos).ptr(a.Sin).ptr(a.Pos).ptr(a.Slot).
		i32(a.Heads).i32(a.KVHeads).i32(a.HeadDim).i32(a.BlockSize).f32(a.Eps)
	grid := cuda.Dim3{X: uint32(a.N), Y: uint32(divUp(th, 4)), Z: 1}
	return k.launch("qkv_rope", k.qkv, grid, cuda.Dim3{X: 128, Y: 1, Z: 1}, 0, s, p)
}

// SiLUMul writes out (dt [n, inter]) = silu(gate)·up where gateUp is dt
// [n, 2·inter] holding [gate | up] and bias (dt [2·inter]) is added to
// both first when not 0.
func (k *Kernels) SiLUMul(s cuda.Stream, out, gateUp, bias cuda.DevicePtr, n, inter int) error {
	if err := checkInt32("silu_mul", "n inter", n, inter); err != nil {
		return err
	}
	if n == 0 || inter == 0 {
		return nil
	}
	v := k.size * 4
	vec := inter%4 == 0 && ptrAligned(out, v) && ptrAligned(gateUp, v) && ptrAligned(bias, v)
	cols := 256
	if vec {
		cols *= 4
	}
	a := newLaunchArgs().ptr(out).ptr(gateUp).ptr(bias).i32(n).i32(inter).i32(flag(vec))
	return k.launch("silu_mul", k.silu, rowsGrid(n, inter, cols), cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s, a)
}

// AttnArgs are the arguments of Attention. Out and Q are dt [NumTokens,
// Heads, HeadDim]; KCache and VCache are one layer of the paged cache, dt
// [blocks, KVHeads, BlockSize, HeadDim], already holding the keys and
// values of the chunk. Sequence s owns query rows QStart[s] ..
// QStart[s+1]-1; its row QStart[s]+i sits at position SeqPos[s]+i and
// attends causally to the keys before it (the last Window of them when
// Window > 0). Scale multiplies q·k.
type AttnArgs struct {
	Out, Q, KCache, VCache cuda.DevicePtr
	BlockTables            cuda.DevicePtr // int32 [NumSeqs, MaxBlocks]
	QStart, SeqPos         cuda.DevicePtr // int32 [NumSeqs+1], [NumSeqs]
	NumSeqs, NumTokens     int
	MaxQLen, MaxBlocks     int
	Heads, KVHeads         int
	HeadDim, BlockSize     int
	Window                 int
	Scale                  float32
	// Workspace is float32 scratch of AttnWorkspaceBytes(NumSeqs, Heads,
	// HeadDim) bytes, used by the decode path.
	Workspace cuda.DevicePtr
	// DecodeSeqs, optional, says that the first DecodeSeqs sequences have
	// exactly one query each. In a mixed batch (MaxQLen > 1) they then take
	// the decode kernels and only the rest the prefill kernel, which would
	// spend a 64-row tile on each of them. 0 sends the whole batch to the
	// prefill kernel; it is ignored when MaxQLen == 1.
	DecodeSeqs int
}

// MaxAttnSplits bounds the number of key splits of the decode path.
const MaxAttnSplits = 64

// splitCap is the largest split count the decode path uses for numSeqs
// sequences: about 1,024 (sequence, split) pairs in all, so the workspace
// stays small at large batch sizes.
func splitCap(numSeqs int) int {
	return min(MaxAttnSplits, max(1, divUp(1024, max(1, numSeqs))))
}

// splitPairs bounds numSeqs·splitCap(numSeqs) over every batch of at most
// numSeqs sequences (the product itself is not monotonic).
func splitPairs(numSeqs int) int {
	if numSeqs <= 1024/MaxAttnSplits {
		return numSeqs * MaxAttnSplits
	}
	return 1024 + numSeqs
}

// AttnWorkspaceBytes is the size of AttnArgs.Workspace for decode batches
// of up to numSeqs sequences: fp32 partial outputs [seqs, heads, splits,
// headDim] followed by their log-sum-exps [seqs, heads, splits]. A
// workspace of this size serves any batch of at most numSeqs sequences.
func AttnWorkspaceBytes(numSeqs, heads, headDim int) int64 {
	return int64(splitPairs(max(0, numSeqs))) * int64(heads) * int64(headDim+1) * 4
}

// decodeWarps is the number of warps (key groups) of a block of the
// attn_decode_w<W>g<GB> kernels.
const decodeWarps = 4

// decodeGeometry is the launch shape of the decode kernels (see
// kernels/attention.cu). When rows is set it is attn_decode_w<w>g<gb>
// with block (32, decodeWarps); otherwise the general kernel (the narrow
// variant when narrow is set) with w elements per vector, block (bdx, gb,
// bdz) and nv vectors per lane.
type decodeGeometry struct {
	rows, narrow         bool
	w, bdx, nv, gb, bdz  int
	groups               int // blocks per KV head: ceil(G/gb)
	threads, sharedBytes int
}

// newDecodeGeometry picks the decode kernel and its shape for elements of
// elemSize bytes, head dimension d, group query heads per KV head and q,
// k and v pointers aligned to align bytes (a power of two). generic forces
// the general kernel.
func newDecodeGeometry(elemSize, d, group, align int, generic bool) decodeGeometry {
	var g decodeGeometry
	w := 8
	switch {
	case d <= 64:
		w = 2
	case d <= 128:
		w = 4
	}
	if !generic && d%w == 0 && align >= min(16, w*elemSize) {
		g.rows, g.w, g.bdx, g.bdz, g.nv = true, w, 32, decodeWarps, 1
		switch {
		case group == 1:
			g.gb = 1
		case group <= 4 || w == 8:
			g.gb = 4
		default:
			g.gb = 8
		}
		g.groups = divUp(group, g.gb)
		g.threads = 32 * decodeWarps
		g.sharedBytes = decodeWarps * g.gb * (d + 2) * 4
		return g
	}
	g.w = 16 / elemSize
	if d%g.w != 0 || align < 16 {
		g.narrow, g.w = true, 2
	}
	vecs := d / g.w
	g.bdx = min(32, pow2AtLeast(vecs))
	g.nv = divUp(vecs, g.bdx)
	g.gb = min(group, max(1, 256/g.bdx))
	g.bdz = max(1, 128/(g.bdx*g.gb))
	g.groups = divUp(group, g.gb)
	g.threads = g.bdx * g.gb * g.bdz
	if g.bdz > 1 {
		g.sharedBytes = g.bdz * g.gb * (d + 2) * 4
	}
	return g
}

// ptrAlignment is the largest power of two, at most 16, dividing every p.
func ptrAlignment(ps ...cuda.DevicePtr) int {
	a := 16
	for _, p := range ps {
		for a > 1 && !ptrAligned(p, a) {
			a /= 2
		}
	}
	return a
}

// decodeSplits is the number of key splits for a decode batch: enough
// blocks for about eight per multiprocessor, at most splitCap(numSeqs). It
// depends only on the batch shape, never on the context lengths.
func (k *Kernels) decodeSplits(numSeqs, blocksPerSeq int) int {
	return min(splitCap(numSeqs), max(1, divUp(8*k.sms, numSeqs*blocksPerSeq)))
}

// prefillStride is the padded shared-memory row stride of the prefill
// kernel (prefill_stride in attention.cu).
func prefillStride(d int) int {
	ks := (d + 3) &^ 3
	if (ks/4)%2 == 0 {
		ks += 4
	}
	return ks
}

// prefillShared is the dynamic shared memory of the prefill kernel for head
// dimension d and bk-key tiles.
func prefillShared(d, bk int) int {
	ks := prefillStride(d)
	return 4*(64*ks+bk*ks+64*(bk+4)) + 8*bk
}

// prefillMMAShared is the dynamic shared memory of the tensor-core prefill
// kernel for head dimension d: query, key and value tiles of 64 rows of
// d+8 16-bit elements.
func prefillMMAShared(d int) int { return 3 * 64 * (d + 8) * 2 }

// Attention computes causal paged attention for every query row: the
// split-K decode kernels and a merge when MaxQLen == 1, else the tiled
// prefill kernel (after the decode kernels for the first DecodeSeqs
// sequences).
func (k *Kernels) Attention(s cuda.Stream, a AttnArgs) error {
	if err := checkInt32("attention", "NumSeqs NumTokens MaxQLen MaxBlocks Heads KVHeads HeadDim BlockSize Window DecodeSeqs",
		a.NumSeqs, a.NumTokens, a.MaxQLen, a.MaxBlocks, a.Heads, a.KVHeads, a.HeadDim, a.BlockSize, a.Window, a.DecodeSeqs); err != nil {
		return err
	}
	if a.DecodeSeqs > a.NumSeqs {
		return fmt.Errorf("cudaexec: attention: %d decode sequences of %d", a.DecodeSeqs, a.NumSeqs)
	}
	switch {
	case a.HeadDim <= 0 || a.HeadDim > 256 || a.HeadDim%2 != 0:
		return fmt.Errorf("cudaexec: attention: head_dim %d: want an even number in [2, 256]", a.HeadDim)
	case a.Heads <= 0 || a.KVHeads <= 0 || a.Heads%a.KVHeads != 0:
		return fmt.Errorf("cudaexec: attention: %d heads, %d kv heads: want a positive multiple", a.Heads, a.KVHeads)
	case a.BlockSize <= 0 || a.MaxBlocks <= 0:
		return fmt.Errorf("cudaexec: attention: block size %d, max blocks %d: want positive", a.BlockSize, a.MaxBlocks)
	case a.NumSeqs > gridYMax || a.Heads > gridYMax:
		return fmt.Errorf("cudaexec: attention: %d sequences, %d heads: at most %d of each per launch", a.NumSeqs, a.Heads, gridYMax)
	}
	if a.NumSeqs == 0 || a.MaxQLen == 0 {
		return nil
	}
	pair := 2 * k.size
	if !ptrAligned(a.Q, pair) || !ptrAligned(a.KCache, pair) || !ptrAligned(a.VCache, pair) {
		return fmt.Errorf("cudaexec: attention: q, k and v caches must be %d-byte aligned", pair)
	}
	scaleLog2 := float32(float64(a.Scale) * math.Log2E)
	group := a.Heads / a.KVHeads
	if a.MaxQLen == 1 {
		return k.decodeAttention(s, a, group, scaleLog2)
	}
	if n := a.DecodeSeqs; n > 0 {
		// The leading single-query sequences through the decode kernels,
		// the rest through prefill: the tables of sequence s start at
		// element s, and query rows are absolute.
		dec := a
		dec.NumSeqs, dec.MaxQLen = n, 1
		if err := k.decodeAttention(s, dec, group, scaleLog2); err != nil {
			return err
		}
		a.NumSeqs -= n
		a.BlockTables += cuda.DevicePtr(4 * int64(n) * int64(a.MaxBlocks))
		a.QStart += cuda.DevicePtr(4 * n)
		a.SeqPos += cuda.DevicePtr(4 * n)
		if a.NumSeqs == 0 {
			return nil
		}
	}
	return k.prefillAttention(s, a, group, scaleLog2)
}

func (k *Kernels) decodeAttention(s cuda.Stream, a AttnArgs, group int, scaleLog2 float32) error {
	if a.Workspace == 0 || !ptrAligned(a.Workspace, 4) {
		return errors.New("cudaexec: attention: decode needs a 4-byte aligned workspace of AttnWorkspaceBytes")
	}
	g := newDecodeGeometry(k.size, a.HeadDim, group, ptrAlignment(a.Q, a.KCache, a.VCache), k.decodeGeneric)
	blocksPerSeq := a.KVHeads * g.groups
	if blocksPerSeq > gridYMax {
		return fmt.Errorf("cudaexec: attention: %d kv heads: too many", a.KVHeads)
	}
	splits := k.decodeSplits(a.NumSeqs, blocksPerSeq)
	part := a.Workspace
	lse := part + cuda.DevicePtr(int64(a.NumSeqs)*int64(a.Heads)*int64(splits)*int64(a.HeadDim)*4)
	p := newLaunchArgs().ptr(part).ptr(lse).ptr(a.Q).ptr(a.KCache).ptr(a.VCache).ptr(a.BlockTables).ptr(a.QStart).ptr(a.SeqPos).
		i32(a.MaxBlocks).i32(a.Heads).i32(a.KVHeads).i32(a.HeadDim).i32(a.BlockSize).i32(a.Window).f32(scaleLog2).
		i32(splits)
	var f cuda.Function
	switch {
	case g.rows:
		wi, gi := rowsIndex(g.w, g.gb)
		f = k.decodeRows[wi][gi]
	case g.narrow:
		f = k.decodeNarrow
	default:
		f = k.decode
	}
	if !g.rows {
		p.i32(g.nv)
	}
	grid := cuda.Dim3{X: uint32(a.NumSeqs), Y: uint32(blocksPerSeq), Z: uint32(splits)}
	block := cuda.Dim3{X: uint32(g.bdx), Y: uint32(g.gb), Z: uint32(g.bdz)}
	if g.rows {
		block = cuda.Dim3{X: 32, Y: decodeWarps, Z: 1}
	}
	if err := k.launch("attention decode", f, grid, block, g.sharedBytes, s, p); err != nil {
		return err
	}
	m := newLaunchArgs().ptr(a.Out).ptr(part).ptr(lse).ptr(a.QStart).i32(a.Heads).i32(a.HeadDim).i32(splits)
	threads := min(256, (a.HeadDim+31)&^31)
	return k.launch("attention merge", k.merge, cuda.Dim3{X: uint32(a.NumSeqs), Y: uint32(a.Heads), Z: 1}, cuda.Dim3{X: uint32(threads), Y: 1, Z: 1}, 0, s, m)
}

func (k *Kernels) prefillAttention(s cuda.Stream, a AttnArgs, group int, scaleLog2 float32) error {
	gb := min(group, 64)
	groups := divUp(group, gb)
	bq := 64 / gb
	if a.KVHeads*groups > gridYMax {
		return fmt.Errorf("cudaexec: attention: %d kv heads: too many", a.KVHeads)
	}
	grid := cuda.Dim3{X: uint32(divUp(a.MaxQLen, bq)), Y: uint32(a.NumSeqs), Z: uint32(a.KVHeads * groups)}
	if k.size == 2 && !k.prefillSIMT && (a.HeadDim == 64 || a.HeadDim == 128) &&
		ptrAlignment(a.Q, a.KCache, a.VCache) == 16 && ptrAligned(a.Out, 4) {
		f := k.prefillMMA[a.HeadDim/128]
		p := newLaunchArgs().ptr(a.Out).ptr(a.Q).ptr(a.KCache).ptr(a.VCache).ptr(a.BlockTables).ptr(a.QStart).ptr(a.SeqPos).
			i32(a.MaxBlocks).i32(a.Heads).i32(a.KVHeads).i32(a.BlockSize).i32(a.Window).f32(scaleLog2).
			i32(gb).i32(bq)
		return k.launch("attention prefill", f, grid, cuda.Dim3{X: 128, Y: 1, Z: 1}, prefillMMAShared(a.HeadDim), s, p)
	}
	f, bk := k.prefill128, 64
	if a.HeadDim > 128 {
		if k.prefill256Err != nil {
			return k.prefill256Err
		}
		f, bk = k.prefill256, 32
	}
	p := newLaunchArgs().ptr(a.Out).ptr(a.Q).ptr(a.KCache).ptr(a.VCache).ptr(a.BlockTables).ptr(a.QStart).ptr(a.SeqPos).
		i32(a.MaxBlocks).i32(a.Heads).i32(a.KVHeads).i32(a.HeadDim).i32(a.BlockSize).i32(a.Window).f32(scaleLog2).
		i32(gb).i32(bq)
	return k.launch("attention prefill", f, grid, cuda.Dim3{X: 16, Y: 16, Z: 1}, prefillShared(a.HeadDim, bk), s, p)
}

// GatherRows writes out[i,:] = in[rows[i],:] for i < m; out and in are dt
// with width columns, rows is int32 [m].
func (k *Kernels) GatherRows(s cuda.Stream, out, in, rows cuda.DevicePtr, m, width int) error {
	if err := checkInt32("gather_rows", "m width", m, width); err != nil {
		return err
	}
	if m == 0 || width == 0 {
		return nil
	}
	a := newLaunchArgs().ptr(out).ptr(in).ptr(rows).i32(m).i32(width)
	return k.launch("gather_rows", k.gather, rowsGrid(m, width, 256), cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s, a)
}

// Copy2D copies a rows × cols block of dt elements from src, whose rows
// are srcPitch elements apart, to dst, whose rows are dstPitch elements
// apart: dst[r·dstPitch+c] = src[r·srcPitch+c].
func (k *Kernels) Copy2D(s cuda.Stream, dst cuda.DevicePtr, dstPitch int, src cuda.DevicePtr, srcPitch int, rows, cols int) error {
	if err := checkInt32("copy2d", "dstPitch srcPitch rows cols", dstPitch, srcPitch, rows, cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	a := newLaunchArgs().ptr(dst).i64(int64(dstPitch)).ptr(src).i64(int64(srcPitch)).i32(rows).i32(cols)
	return k.launch("copy2d", k.copy2d, rowsGrid(rows, cols, 256), cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s, a)
}

// streamGrid is the grid of the grid-stride kernels over n elements, eight
// per thread per step.
func streamGrid(n int64) cuda.Dim3 {
	blocks := min((n+2047)/2048, 8192)
	return cuda.Dim3{X: uint32(max(blocks, 1)), Y: 1, Z: 1}
}

func (k *Kernels) stream(what string, f cuda.Function, s cuda.Stream, out, in cuda.DevicePtr, n int64) error {
	if n < 0 {
		return fmt.Errorf("cudaexec: %s: n = %d", what, n)
	}
	if n == 0 {
		return nil
	}
	a := newLaunchArgs().ptr(out).ptr(in).i64(n)
	return k.launch(what, f, streamGrid(n), cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s, a)
}

// Add sets dst[i] = dst[i] + src[i] for i < n (both dt), rounding to dt.
func (k *Kernels) Add(s cuda.Stream, dst, src cuda.DevicePtr, n int64) error {
	return k.stream("add", k.add, s, dst, src, n)
}

// Argmax writes idx[i] (int32) = the first index of the largest element of
// row i of logits (float32 [rows, vocab]); NaN never wins.
func (k *Kernels) Argmax(s cuda.Stream, idx, logits cuda.DevicePtr, rows, vocab int) error {
	if err := checkInt32("argmax", "rows vocab", rows, vocab); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	if vocab == 0 {
		return errors.New("cudaexec: argmax: empty rows")
	}
	threads := min(1024, (vocab+31)&^31)
	a := newLaunchArgs().ptr(idx).ptr(logits).i32(vocab)
	return k.launch("argmax", k.argmax, cuda.Dim3{X: uint32(rows), Y: 1, Z: 1}, cuda.Dim3{X: uint32(threads), Y: 1, Z: 1}, 0, s, a)
}

// Convert writes out[i] = in[i] rounded to dt (to nearest even) for i < n;
// in is float32.
func (k *Kernels) Convert(s cuda.Stream, out, in cuda.DevicePtr, n int64) error {
	return k.stream("convert", k.convert, s, out, in, n)
}

// ToF32 writes out[i] (float32) = in[i] (dt) for i < n.
func (k *Kernels) ToF32(s cuda.Stream, out, in cuda.DevicePtr, n int64) error {
	return k.stream("to_f32", k.toF32, s, out, in, n)
}
