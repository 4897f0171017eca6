// Package safetensors reads and writes the Hugging Face safetensors format:
// an 8-byte little-endian header length N, N bytes of JSON describing each
// tensor's dtype, shape and byte range, then the raw little-endian data.
//
// Its one job is to turn an untrusted file into tensor views that are safe
// to use. The invariant it keeps: every [Tensor] returned by [Parse], [Open]
// or [OpenDir] is a view that lies inside its file's data section, holds
// exactly NumElements·DType.Size() bytes, and overlaps no other tensor of
// the file. A truncated or hostile file is rejected with an error that
// names the file and the tensor and matches [ErrInvalid]; it never causes a
// panic or an allocation larger than a small multiple of the header, which
// is itself capped at [MaxHeaderSize].
//
// Files opened with [Open] are memory-mapped read-only on Unix and read
// into memory elsewhere. Tensor views stay valid until the File (or the
// [Set] holding it) is closed. Files and Sets are immutable after
// construction and safe for concurrent use by multiple goroutines; Close
// must not run concurrently with other use.
//
// The write side ([Write], [WriteFile], [WriteSharded]) produces files and
// sharded directories laid out as the reference Rust writer and
// transformers' save_pretrained produce them; it exists mostly so tests
// across the project can build fixtures in a line or two.
package safetensors
