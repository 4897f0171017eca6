package safetensors

// DType is a safetensors element type, spelled as in the file header
// ("F32", "BF16", ...).
type DType string

// The element types of the safetensors format that have a whole-byte size.
// Only F32, F16 and BF16 convert to float32; the others are parsed, sized
// and exposed as raw bytes.
const (
	BOOL   DType = "BOOL"
	U8     DType = "U8"
	I8     DType = "I8"
	F8E5M2 DType = "F8_E5M2"
	F8E4M3 DType = "F8_E4M3"
	F8E8M0 DType = "F8_E8M0"
	I16    DType = "I16"
	U16    DType = "U16"
	F16    DType = "F16"
	BF16   DType = "BF16"
	I32    DType = "I32"
	U32    DType = "U32"
	F32    DType = "F32"
	C64    DType = "C64"
	F64    DType = "F64"
	I64    DType = "I64"
	U64    DType = "U64"
	F4     DType = "F4"      // two values per byte; not supported
	F6E2M3 DType = "F6_E2M3" // packed 6-bit; not supported
	F6E3M2 DType = "F6_E3M2" // packed 6-bit; not supported
)

// dtypeInfo holds each whole-byte dtype's size in bytes and its rank in the
// reference implementation's Dtype enum, which orders tensors in the data
// section (highest rank first) so each lands aligned to its element size.
var dtypeInfo = map[DType]struct{ size, rank int }{
	BOOL:   {1, 0},
	U8:     {1, 4},
	I8:     {1, 5},
	F8E5M2: {1, 6},
	F8E4M3: {1, 7},
	F8E8M0: {1, 8},
	I16:    {2, 9},
	U16:    {2, 10},
	F16:    {2, 11},
	BF16:   {2, 12},
	I32:    {4, 13},
	U32:    {4, 14},
	F32:    {4, 15},
	C64:    {8, 16},
	F64:    {8, 17},
	I64:    {8, 18},
	U64:    {8, 19},
}

// Size is the size of one element in bytes, or 0 for a dtype this package
// does not know or cannot address per element (F4, F6_*).
func (d DType) Size() int { return dtypeInfo[d].size }

// Float reports whether values of this dtype convert to float32 (F32, F16,
// BF16).
func (d DType) Float() bool { return d == F32 || d == F16 || d == BF16 }

// subByte reports whether d is a known packed dtype narrower than a byte.
func (d DType) subByte() bool { return d == F4 || d == F6E2M3 || d == F6E3M2 }
