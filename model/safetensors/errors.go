package safetensors

import (
	"errors"
	"strconv"
)

// ErrInvalid matches (with errors.Is) every error reporting a malformed,
// truncated or inconsistent file, index or model directory, and a file
// that uses a feature this package cannot represent (a sub-byte dtype).
var ErrInvalid = errors.New("invalid safetensors data")

// ErrUnsupported matches errors for a valid tensor whose dtype cannot be
// converted as asked (for example F64 or I64 to float32).
var ErrUnsupported = errors.New("unsupported dtype")

// FormatError describes one problem found while validating a file. It
// matches ErrInvalid and, when set, Err.
type FormatError struct {
	File   string // file name as given to Open or Parse
	Tensor string // offending tensor, or "" for a file-level problem
	Msg    string // what is wrong
	Err    error  // underlying cause, or nil
}

func (e *FormatError) Error() string {
	s := "safetensors: " + e.File
	if e.Tensor != "" {
		s += ": tensor " + strconv.Quote(e.Tensor)
	}
	s += ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrInvalid and the cause, so errors.Is and errors.As see
// both.
func (e *FormatError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}
