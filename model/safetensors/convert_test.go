package safetensors

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// format describes a 16-bit float format for the reference conversions.
type format struct {
	name      string
	expBits   int
	mantBits  int
	toFloat32 func(uint16) float32
	fromF32   func(float32) uint16
}

var formats = []format{
	{"BF16", 8, 7, BF16ToFloat32, Float32ToBF16},
	{"F16", 5, 10, F16ToFloat32, Float32ToF16},
}

// infBits is the +Inf pattern; the positive finite patterns below it
// increase monotonically in value.
func (f format) infBits() uint16 { return uint16((1<<f.expBits - 1) << f.mantBits) }

// value computes the pattern's value with float64 math from its fields.
// For the +Inf pattern it returns the value the next binade would start
// at, which is where rounding to Inf begins.
func (f format) value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	bias := 1<<(f.expBits-1) - 1
	e := int(h>>f.mantBits) & (1<<f.expBits - 1)
	m := int(h) & (1<<f.mantBits - 1)
	switch {
	case e == 1<<f.expBits-1 && m == 0:
		return sign * math.Ldexp(1, bias+1)
	case e == 1<<f.expBits-1:
		return math.NaN()
	case e == 0:
		return sign * math.Ldexp(float64(m), 1-bias-f.mantBits)
	}
	return sign * math.Ldexp(float64(m|1<<f.mantBits), e-bias-f.mantBits)
}

// nearest is the reference rounding: the pattern nearest to x (finite),
// ties to the even pattern, by binary search over the ordered patterns.
func (f format) nearest(x float64) uint16 {
	var sign uint16
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	inf := f.infBits()
	i := sort.Search(int(inf)+1, func(i int) bool { return f.value(uint16(i)) >= x })
	if i > int(inf) {
		return sign | inf
	}
	p := uint16(i)
	if p > 0 && f.value(p) != x {
		dlo, dhi := x-f.value(p-1), f.value(p)-x
		if dlo < dhi || dlo == dhi && (p-1)&1 == 0 {
			p--
		}
	}
	return sign | p
}

// TestToFloat32Exhaustive checks every 16-bit pattern against float64 math
// and that converting back returns the same pattern.
func TestToFloat32Exhaustive(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			for i := 0; i < 1<<16; i++ {
				h := uint16(i)
				got := f.toFloat32(h)
				want := f.value(h)
				if h&0x7fff == f.infBits() {
					want = math.Inf(1 - 2*int(h>>15))
				}
				if math.IsNaN(want) {
					if !math.IsNaN(float64(got)) || math.Signbit(float64(got)) != (h&0x8000 != 0) {
						t.Fatalf("%#04x: got %v, want NaN with sign %d", h, got, h>>15)
					}
					if back := f.fromF32(got); back != h && back != h|1<<(f.mantBits-1) {
						t.Fatalf("%#04x: NaN round-trips to %#04x", h, back)
					}
					continue
				}
				if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
					t.Fatalf("%#04x: got %v, want %v", h, got, want)
				}
				if back := f.fromF32(got); back != h {
					t.Fatalf("%#04x -> %v -> %#04x", h, got, back)
				}
			}
		})
	}
}

// TestFromFloat32Rounding checks rounding at and beside every midpoint
// between neighbouring patterns (ties to even, overflow to Inf, underflow
// through subnormals to zero) and at random float32 values.
func TestFromFloat32Rounding(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			var inputs []float32
			for p := uint16(0); p < f.infBits(); p++ {
				mid := float32((f.value(p) + f.value(p+1)) / 2) // exact in float32
				inputs = append(inputs, mid,
					math.Nextafter32(mid, float32(math.Inf(1))),
					math.Nextafter32(mid, 0))
			}
			for range 200000 {
				inputs = append(inputs, math.Float32frombits(rng.Uint32()))
			}
			inputs = append(inputs, math.MaxFloat32, math.SmallestNonzeroFloat32, 0, float32(math.Inf(1)))
			for _, in := range inputs {
				for _, x := range []float32{in, -in} {
					got := f.fromF32(x)
					if math.IsNaN(float64(x)) {
						if !math.IsNaN(float64(f.toFloat32(got))) {
							t.Fatalf("%v (%#08x) -> %#04x, want NaN", x, math.Float32bits(x), got)
						}
						continue
					}
					if want := f.nearest(float64(x)); got != want {
						t.Fatalf("%v (%#08x) -> %#04x, want %#04x", x, math.Float32bits(x), got, want)
					}
				}
			}
		})
	}
}

func TestSpecialValues(t *testing.T) {
	inf := float32(math.Inf(1))
	tests := []struct {
		in       float32
		f16, b16 uint16
	}{
		{0, 0x0000, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{1, 0x3c00, 0x3f80},
		{-2, 0xc000, 0xc000},
		{inf, 0x7c00, 0x7f80},
		{-inf, 0xfc00, 0xff80},
		{65504, 0x7bff, 0x4780},
		{65519.996, 0x7bff, 0x4780},
		{65520, 0x7c00, 0x4780},
		{0x1p-24, 0x0001, 0x3380},
		{0x1p-25, 0x0000, 0x3300},
		{0x1.000002p-25, 0x0001, 0x3300},
		{0x1p-14, 0x0400, 0x3880},
		{0x1.ffcp-15, 0x0400, 0x3880}, // largest subnormal + half ulp rounds up to the smallest normal
		{1.0009765625, 0x3c01, 0x3f80},
		{1.00048828125, 0x3c00, 0x3f80}, // F16 tie, to even
		{1.00146484375, 0x3c02, 0x3f80}, // F16 tie, to even (up)
		{1.00390625, 0x3c04, 0x3f80},    // BF16 tie 1 + 2⁻⁸, to even (down)
		{1.01171875, 0x3c0c, 0x3f82},    // BF16 tie 1 + 3·2⁻⁸, to even (up)
		{math.MaxFloat32, 0x7c00, 0x7f80},
		{3.3895314e38, 0x7c00, 0x7f7f}, // largest finite BF16
	}
	for _, tt := range tests {
		if got := Float32ToF16(tt.in); got != tt.f16 {
			t.Errorf("Float32ToF16(%v) = %#04x, want %#04x", tt.in, got, tt.f16)
		}
		if got := Float32ToBF16(tt.in); got != tt.b16 {
			t.Errorf("Float32ToBF16(%v) = %#04x, want %#04x", tt.in, got, tt.b16)
		}
	}
	nan := float32(math.NaN())
	if h := Float32ToF16(nan); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("Float32ToF16(NaN) = %#04x, not a NaN", h)
	}
	if h := Float32ToBF16(nan); h&0x7f80 != 0x7f80 || h&0x7f == 0 {
		t.Errorf("Float32ToBF16(NaN) = %#04x, not a NaN", h)
	}
	// A NaN whose payload lies only in bits that are dropped stays NaN.
	low := math.Float32frombits(0x7f800001)
	if h := Float32ToF16(low); h&0x3ff == 0 {
		t.Errorf("Float32ToF16(%#08x) = %#04x, became Inf", math.Float32bits(low), h)
	}
	if h := Float32ToBF16(low); h&0x7f == 0 {
		t.Errorf("Float32ToBF16(%#08x) = %#04x, became Inf", math.Float32bits(low), h)
	}
}

// TestDecodeMatchesScalar checks the bulk decoders against the scalar
// conversions for every pattern and for every tail length.
func TestDecodeMatchesScalar(t *testing.T) {
	src := make([]byte, 2<<16)
	for i := range 1 << 16 {
		src[2*i], src[2*i+1] = byte(i), byte(i>>8)
	}
	for _, tt := range []struct {
		name   string
		bulk   func([]float32, []byte)
		scalar func(uint16) float32
	}{{"BF16", decodeBF16, BF16ToFloat32}, {"F16", decodeF16, F16ToFloat32}} {
		for _, n := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 1 << 16} {
			dst := make([]float32, n)
			tt.bulk(dst, src[:2*n])
			for i, got := range dst {
				if want := tt.scalar(uint16(i)); math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s n=%d: element %d = %#08x, want %#08x", tt.name, n, i, math.Float32bits(got), math.Float32bits(want))
				}
			}
		}
	}
	f32 := []float32{1, -2, float32(math.Inf(1)), 0x1p-140}
	raw := make([]byte, 16)
	encode(raw, F32, f32)
	dst := make([]float32, 4)
	decodeF32(dst, raw)
	for i := range dst {
		if dst[i] != f32[i] {
			t.Fatalf("decodeF32 element %d = %v, want %v", i, dst[i], f32[i])
		}
	}
}
