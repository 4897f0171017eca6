package cudaexec

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gearboxlm/gearbox/gpu/cuda"
	"github.com/gearboxlm/gearbox/model"
)

// nvrtcFallbacks are searched when cuda.LoadNVRTC finds no NVRTC under the
// names the backend uses in production (CI hosts carry older toolkits,
// e.g. libnvrtc.so.11.2 from CUDA 11.8).
var nvrtcFallbacks = []string{
	"/usr/local/cuda*/targets/x86_64-linux/lib/libnvrtc.so*",
	"/usr/local/cuda*/lib64/libnvrtc.so*",
	"/usr/lib/x86_64-linux-gnu/libnvrtc.so*",
}

var nvrtcOnce = sync.OnceValues(func() (*cuda.NVRTC, error) {
	nv, err := cuda.LoadNVRTC()
	if err == nil {
		return nv, nil
	}
	for _, pat := range nvrtcFallbacks {
		paths, _ := filepath.Glob(pat)
		for _, p := range paths {
			if strings.Contains(p, "builtins") || strings.Contains(p, "/stubs/") || strings.HasSuffix(p, ".alt.so") {
				continue
			}
			if nv2, err2 := cuda.LoadNVRTCFrom(p); err2 == nil {
				return nv2, nil
			}
		}
	}
	return nil, err
})

// loadNVRTC returns NVRTC or skips the test when the host has none.
func loadNVRTC(t testing.TB) *cuda.NVRTC {
	t.Helper()
	nv, err := nvrtcOnce()
	if err != nil {
		t.Skip("NVRTC not found: " + firstLine(err.Error()))
	}
	return nv
}

// firstLine shortens an error for a one-line skip message: its first
// line, without the list of places searched.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	line, _, _ = strings.Cut(line, "; looked in")
	return line
}

var allDTypes = []model.DType{model.Float32, model.Float16, model.BFloat16}

// TestKernelsCompile compiles the kernel source for sm_80 and sm_90 with
// the options LoadKernels uses for each dtype and checks that every entry
// point LoadKernels resolves is a function symbol of the cubin. It logs
// each kernel's registers, shared memory and spills from ptxas.
func TestKernelsCompile(t *testing.T) {
	nv := loadNVRTC(t)
	major, minor := nv.Version()
	t.Logf("NVRTC %d.%d at %s", major, minor, nv.Path())
	for _, arch := range []string{"sm_80", "sm_90"} {
		for _, dt := range allDTypes {
			t.Run(arch+"/"+dt.String(), func(t *testing.T) {
				t.Parallel()
				opts, err := compileOptions(dt)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, "--gpu-architecture="+arch, "--ptxas-options=-v")
				image, log, err := nv.Compile("gearbox_kernels.cu", KernelSource(), opts)
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				if warnings := compilerWarnings(log); warnings != "" {
					t.Errorf("compiler warnings:\n%s", warnings)
				}
				f, err := parseCubin(image)
				if err != nil {
					t.Fatalf("cubin is not ELF: %v", err)
				}
				syms, err := f.Symbols()
				if err != nil {
					t.Fatalf("cubin symbols: %v", err)
				}
				funcs := map[string]bool{}
				for _, s := range syms {
					// Kernels are global; the compiler's slow-path helpers
					// ($kernel$__cuda_...) are weak.
					if elf.ST_TYPE(s.Info) == elf.STT_FUNC && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
						funcs[s.Name] = true
					}
				}
				names, err := entryPoints(dt)
				if err != nil {
					t.Fatal(err)
				}
				for _, n := range names {
					if !funcs[n] {
						t.Errorf("entry point %s missing from the cubin", n)
					}
					if f.Section(".text."+n) == nil {
						t.Errorf("no code section .text.%s in the cubin", n)
					}
				}
				if len(funcs) != len(names) {
					t.Errorf("the cubin has %d kernels, LoadKernels resolves %d", len(funcs), len(names))
				}
				for _, u := range parseUsage(log) {
					t.Log(u)
				}
			})
		}
	}
}

// parseCubin opens a cubin with debug/elf. NVIDIA stores its own version
// number in the header's e_version field, which debug/elf rejects, so a
// copy with e_version = EV_CURRENT is parsed.
func parseCubin(image []byte) (*elf.File, error) {
	const eVersion = 20 // offset of e_version in the ELF header
	if len(image) < eVersion+4 {
		return nil, fmt.Errorf("%d-byte image", len(image))
	}
	fixed := bytes.Clone(image)
	binary.LittleEndian.PutUint32(fixed[eVersion:], uint32(elf.EV_CURRENT))
	return elf.NewFile(bytes.NewReader(fixed))
}

// compilerWarnings returns the log lines that are not ptxas's -v report.
func compilerWarnings(log string) string {
	var out []string
	for line := range strings.SplitSeq(log, "\n") {
		line = strings.TrimRight(line, "\x00 \r")
		if line == "" || strings.HasPrefix(line, "ptxas info") || strings.HasPrefix(line, "ptxas         .") {
			continue
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

var (
	reEntry = regexp.MustCompile(`Compiling entry function '([^']+)'`)
	reFrame = regexp.MustCompile(`(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads`)
	reUsed  = regexp.MustCompile(`Used (\d+) registers(?:, (\d+) bytes smem)?`)
)

// parseUsage turns ptxas's -v report into one line per kernel.
func parseUsage(log string) []string {
	var out []string
	name, frame := "", ""
	for line := range strings.SplitSeq(log, "\n") {
		if m := reEntry.FindStringSubmatch(line); m != nil {
			name, frame = m[1], ""
		} else if m := reFrame.FindStringSubmatch(line); m != nil {
			frame = fmt.Sprintf("stack %s B, spills %s/%s B", m[1], m[2], m[3])
		} else if m := reUsed.FindStringSubmatch(line); m != nil && name != "" {
			smem := m[2]
			if smem == "" {
				smem = "0"
			}
			out = append(out, fmt.Sprintf("%-26s %3s regs, static smem %4s B, %s", name, m[1], smem, frame))
		}
	}
	slices.Sort(out)
	return out
}

func TestKernelSource(t *testing.T) {
	src := KernelSource()
	for _, f := range kernelFiles {
		if !strings.Contains(src, fmt.Sprintf("#line 1 %q\n", f)) {
			t.Errorf("KernelSource lacks %s", f)
		}
	}
	if strings.Contains(src, "#include") {
		t.Error("KernelSource includes a header; NVRTC versions find different ones")
	}
	if _, err := entryPoints(model.DTypeAuto); err == nil {
		t.Error("entryPoints(auto) succeeded")
	}
}

// TestDecodeGeometry checks the decode kernels' launch shapes against the
// kernels' assumptions for every even head dimension, group size and
// pointer alignment.
func TestDecodeGeometry(t *testing.T) {
	for _, size := range []int{2, 4} {
		for d := 2; d <= 256; d += 2 {
			for group := 1; group <= 64; group++ {
				for _, align := range []int{16, 8, 4} {
					for _, generic := range []bool{false, true} {
						g := newDecodeGeometry(size, d, group, align, generic)
						bad := func(why string) {
							t.Fatalf("size %d d %d group %d align %d generic %v: %+v: %s", size, d, group, align, generic, g, why)
						}
						if g.groups*g.gb < group || g.gb < 1 || g.sharedBytes > 48<<10 {
							bad("head groups or shared memory")
						}
						if g.rows {
							wi, gi := rowsIndex(g.w, g.gb)
							switch {
							case generic:
								bad("rows kernel despite generic")
							case g.w != 2 && g.w != 4 && g.w != 8, 32*g.w < d, d%g.w != 0, align < min(16, g.w*size):
								bad("vector width")
							case g.gb != 1 && g.gb != 4 && g.gb != 8, g.w == 8 && g.gb == 8, wi == 2 && gi == 2:
								bad("no such kernel")
							case g.threads != 32*decodeWarps:
								bad("threads")
							}
							continue
						}
						switch {
						case g.w*size != 16 && g.w != 2, d%g.w != 0, !g.narrow && align < 16:
							bad("vector width")
						case g.bdx < 1 || g.bdx > 32 || g.bdx&(g.bdx-1) != 0:
							bad("lanes per row not a power of two <= 32")
						case g.nv < 1 || g.nv*g.w > 8 || g.bdx*g.nv*g.w < d:
							bad("a lane holds more than 8 elements, or a row is not covered")
						case g.threads < 1 || g.threads > 256 || g.threads != g.bdx*g.gb*g.bdz:
							bad("threads")
						case g.gb > group:
							bad("heads per block")
						}
					}
				}
			}
		}
	}
	// The common shapes take the rows kernel.
	for _, c := range []struct{ size, d, group, w, gb int }{{2, 128, 4, 4, 4}, {2, 64, 8, 2, 8}, {2, 256, 8, 8, 4}, {4, 128, 1, 4, 1}, {2, 80, 3, 4, 4}} {
		if g := newDecodeGeometry(c.size, c.d, c.group, 16, false); !g.rows || g.w != c.w || g.gb != c.gb {
			t.Errorf("size %d d %d group %d: %+v, want the w%dg%d kernel", c.size, c.d, c.group, g, c.w, c.gb)
		}
	}
	if got := ptrAlignment(0x1000, 0x2008, 0x3004); got != 4 {
		t.Errorf("ptrAlignment = %d, want 4", got)
	}
}

func TestAttnWorkspace(t *testing.T) {
	prev := int64(0)
	for n := 1; n <= 5000; n++ {
		ws := AttnWorkspaceBytes(n, 3, 5)
		if ws < prev {
			t.Fatalf("AttnWorkspaceBytes(%d) = %d < AttnWorkspaceBytes(%d) = %d", n, ws, n-1, prev)
		}
		prev = ws
		if need := int64(n*splitCap(n)) * 3 * 6 * 4; ws < need {
			t.Fatalf("AttnWorkspaceBytes(%d) = %d, decode uses up to %d", n, ws, need)
		}
		k := &Kernels{sms: 132}
		if s := k.decodeSplits(n, 8); s < 1 || s > splitCap(n) {
			t.Fatalf("decodeSplits(%d, 8) = %d outside [1, %d]", n, s, splitCap(n))
		}
	}
}

func TestPrefillShared(t *testing.T) {
	for d := 2; d <= 256; d += 2 {
		ks := prefillStride(d)
		if ks < d || ks%4 != 0 || (ks/4)%2 != 1 {
			t.Fatalf("prefillStride(%d) = %d", d, ks)
		}
		bk, limit := 64, prefillShared(128, 64)
		if d > 128 {
			bk, limit = 32, prefillShared(256, 32)
		}
		if s := prefillShared(d, bk); s > limit {
			t.Fatalf("prefillShared(%d) = %d above the limit %d set at load", d, s, limit)
		}
	}
	if s := prefillShared(256, 32); s > 163<<10 {
		t.Errorf("prefill d=256 needs %d bytes of shared memory, more than an A100 block may have", s)
	}
}

var (
	rePTXEntry = regexp.MustCompile(`\.entry\s+(\w+)\s*\(([^)]*)\)`)
	rePTXParam = regexp.MustCompile(`\.param\s+\.(\w+)`)
)

// ptxSignatures compiles dt's kernels to PTX and returns the parameter
// kinds of each entry point, in launchArgs's letters ('8' for any 64-bit
// integer or pointer, 'i' for a 32-bit integer, 'f' for float).
func ptxSignatures(t *testing.T, nv *cuda.NVRTC, dt model.DType) map[string]string {
	t.Helper()
	opts, err := compileOptions(dt)
	if err != nil {
		t.Fatal(err)
	}
	ptx, _, err := nv.Compile("gearbox_kernels.cu", KernelSource(), append(opts, "--gpu-architecture=compute_80"))
	if err != nil {
		t.Fatalf("compile to PTX: %v", err)
	}
	sigs := map[string]string{}
	for _, m := range rePTXEntry.FindAllStringSubmatch(string(ptx), -1) {
		var kinds []byte
		for _, p := range rePTXParam.FindAllStringSubmatch(m[2], -1) {
			switch p[1] {
			case "u64", "s64", "b64":
				kinds = append(kinds, '8')
			case "u32", "s32", "b32":
				kinds = append(kinds, 'i')
			case "f32":
				kinds = append(kinds, 'f')
			default:
				t.Fatalf("%s: parameter type .%s", m[1], p[1])
			}
		}
		sigs[m[1]] = string(kinds)
	}
	return sigs
}

// TestLaunchSignatures runs every launch wrapper, on every path, against
// a recorder instead of a device and checks each launch's arguments
// against the kernel's PTX signature, and its grid and block against the
// CUDA limits.
func TestLaunchSignatures(t *testing.T) {
	nv := loadNVRTC(t)
	for _, dt := range allDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			t.Parallel()
			sigs := ptxSignatures(t, nv, dt)
			names, err := entryPoints(dt)
			if err != nil {
				t.Fatal(err)
			}
			k := &Kernels{dt: dt, size: dt.Size(), sms: 132}
			fs, _ := k.funcs()
			for i, f := range fs {
				*f.fn = cuda.Function(i + 1)
			}
			launched := map[string]int{}
			k.launchHook = func(f cuda.Function, grid, block cuda.Dim3, shared int, a *launchArgs) error {
				name := names[int(f)-1]
				launched[name]++
				want, ok := sigs[name]
				if !ok {
					t.Fatalf("%s: no such entry in the PTX", name)
				}
				got := strings.NewReplacer("p", "8", "l", "8").Replace(string(a.kinds))
				if got != want {
					t.Errorf("%s: launched with arguments %q, kernel takes %q", name, got, want)
				}
				if len(a.ptrs) != len(a.kinds) {
					t.Errorf("%s: %d pointers, %d kinds", name, len(a.ptrs), len(a.kinds))
				}
				threads := block.X * block.Y * block.Z
				limit := 48 << 10
				if strings.HasPrefix(name, "attn_prefill") {
					limit = prefillShared(256, 32)
				}
				switch {
				case threads == 0 || threads > 1024 || block.Z > 64:
					t.Errorf("%s: block %v", name, block)
				case grid.X == 0 || grid.Y == 0 || grid.Z == 0 || grid.X > math.MaxInt32 || grid.Y > gridYMax || grid.Z > gridYMax:
					t.Errorf("%s: grid %v", name, grid)
				case shared < 0 || shared > limit:
					t.Errorf("%s: %d bytes of shared memory", name, shared)
				}
				return nil
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			const p = cuda.DevicePtr(1 << 20)
			must(k.Embed(0, p, p, p, 7, 200, 0, 100))
			must(k.GatherRows(0, p, p, p, 5, 200))
			must(k.Copy2D(0, p, 300, p, 210, 5, 201))
			must(k.SiLUMul(0, p, p, p, 7, 200))
			must(k.SiLUMul(0, p, p, 0, 70000, 201))
			must(k.Add(0, p, p, 1001))
			must(k.Convert(0, p, p, 1<<33))
			must(k.ToF32(0, p, p, 3))
			must(k.AddRMSNorm(0, p, p, p, p, p, 7, 200, 1e-6))
			must(k.AddRMSNorm(0, p, p, 0, 0, p, 70000, 8192, 1e-6))
			must(k.QKVRope(0, QKVArgs{Q: p, KCache: p, VCache: p, QKV: p, Cos: p, Sin: p, Pos: p, Slot: p,
				N: 7, Heads: 8, KVHeads: 2, HeadDim: 128, BlockSize: 16, Eps: 1e-6}))
			must(k.Argmax(0, p, p, 5, 151936))
			attn := func(heads, kvHeads, d, maxQLen, decodeSeqs int, q cuda.DevicePtr) {
				t.Helper()
				must(k.Attention(0, AttnArgs{Out: p, Q: q, KCache: p, VCache: p, BlockTables: p, QStart: p, SeqPos: p,
					NumSeqs: 5, NumTokens: 9, MaxQLen: maxQLen, MaxBlocks: 300, Heads: heads, KVHeads: kvHeads,
					HeadDim: d, BlockSize: 16, Window: 0, Scale: 0.1, Workspace: p, DecodeSeqs: decodeSeqs}))
			}
			for _, d := range []int{64, 128, 256} {
				for _, group := range []int{1, 4, 8} {
					attn(2*group, 2, d, 1, 0, p)
				}
			}
			attn(8, 2, 98, 1, 0, p)                              // narrow general decode
			attn(8, 2, 128, 1, 0, p+cuda.DevicePtr(2*dt.Size())) // q aligned to a pair only: general decode
			k.decodeGeneric = true
			attn(8, 2, 128, 1, 0, p)
			k.decodeGeneric = false
			attn(8, 2, 128, 70, 0, p) // tensor cores for the 16-bit types
			attn(8, 2, 64, 70, 0, p)
			attn(8, 2, 98, 70, 0, p) // SIMT for every type
			k.prefillSIMT = true
			attn(8, 2, 128, 70, 0, p)
			k.prefillSIMT = false
			attn(8, 2, 256, 70, 0, p)
			attn(64, 1, 128, 70, 3, p) // mixed: decode then prefill
			for _, n := range names {
				if launched[n] == 0 {
					t.Errorf("no wrapper launched %s", n)
				}
			}
		})
	}
}
