package gpu

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// ComputeCapability is a GPU's SM version, e.g. {9, 0} for an H100.
type ComputeCapability struct{ Major, Minor int }

// Arch is the NVRTC --gpu-architecture value for a cubin, e.g. "sm_90".
func (c ComputeCapability) Arch() string { return fmt.Sprintf("sm_%d%d", c.Major, c.Minor) }

// KernelKey is everything a compiled kernel depends on. Two keys with equal
// fields address the same cache file; changing any field changes the file.
type KernelKey struct {
	Source        string            // CUDA C source
	Options       []string          // NVRTC options, in the order passed
	Capability    ComputeCapability // target device
	DriverVersion int               // cuDriverGetVersion, e.g. 13000
	NVRTCVersion  [2]int            // nvrtcVersion major, minor
}

// Hash is the hex SHA-256 of the key's fields, each length-prefixed so that
// no two different keys encode the same bytes.
func (k KernelKey) Hash() string {
	sum := k.sum()
	return hex.EncodeToString(sum[:])
}

func (k KernelKey) sum() [sha256.Size]byte {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("gearbox-kernel-v1")
	field(k.Source)
	field(strconv.Itoa(len(k.Options)))
	for _, o := range k.Options {
		field(o)
	}
	field(k.Capability.Arch())
	field(strconv.Itoa(k.DriverVersion))
	field(fmt.Sprintf("%d.%d", k.NVRTCVersion[0], k.NVRTCVersion[1]))
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// ErrCorrupt is wrapped by KernelCache.Get when a cache file exists but
// fails its checks; the caller recompiles and Puts over it.
var ErrCorrupt = errors.New("corrupt kernel cache file")

// KernelCache stores compiled kernels (cubin or PTX) in Dir, one file per
// key. Get and Put may be called concurrently, also from several processes:
// Put writes a temporary file and renames it into place, so a reader sees
// either no file or a whole one.
type KernelCache struct {
	Dir string
}

// DefaultKernelCacheDir is $GEARBOX_CACHE_DIR if set, else
// os.UserCacheDir()/gearbox/kernels.
func DefaultKernelCacheDir(getenv func(string) string) (string, error) {
	if d := getenv("GEARBOX_CACHE_DIR"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("gpu: kernel cache dir: set GEARBOX_CACHE_DIR: %w", err)
	}
	return filepath.Join(base, "gearbox", "kernels"), nil
}

// Path is the file that holds key's kernel.
func (c KernelCache) Path(key KernelKey) string {
	return filepath.Join(c.Dir, key.Hash()+".bin")
}

// File layout: magic, key sum (32 bytes), payload length (uint64 LE),
// payload SHA-256 (32 bytes), payload.
const kernelMagic = "GBKERN1\n"

const kernelHeaderSize = len(kernelMagic) + sha256.Size + 8 + sha256.Size

// Get returns key's kernel. A missing file is a miss (nil, false, nil); a
// file with a wrong magic, key, length or checksum returns an error
// wrapping ErrCorrupt.
func (c KernelCache) Get(key KernelKey) ([]byte, bool, error) {
	path := c.Path(key)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("gpu: kernel cache: %w", err)
	}
	corrupt := func(why string) ([]byte, bool, error) {
		return nil, false, fmt.Errorf("gpu: kernel cache %s: %w: %s", path, ErrCorrupt, why)
	}
	if len(data) < kernelHeaderSize || string(data[:len(kernelMagic)]) != kernelMagic {
		return corrupt("bad header")
	}
	rest := data[len(kernelMagic):]
	keySum := key.sum()
	if !bytes.Equal(rest[:sha256.Size], keySum[:]) {
		return corrupt("key mismatch")
	}
	rest = rest[sha256.Size:]
	n := binary.LittleEndian.Uint64(rest[:8])
	want := rest[8 : 8+sha256.Size]
	payload := rest[8+sha256.Size:]
	if uint64(len(payload)) != n {
		return corrupt(fmt.Sprintf("length %d, header says %d", len(payload), n))
	}
	got := sha256.Sum256(payload)
	if !bytes.Equal(got[:], want) {
		return corrupt("checksum mismatch")
	}
	return payload, true, nil
}

// Put stores kernel under key, creating Dir if needed.
func (c KernelCache) Put(key KernelKey, kernel []byte) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("gpu: kernel cache: %w", err)
	}
	buf := make([]byte, 0, kernelHeaderSize+len(kernel))
	buf = append(buf, kernelMagic...)
	keySum := key.sum()
	buf = append(buf, keySum[:]...)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(kernel)))
	sum := sha256.Sum256(kernel)
	buf = append(buf, sum[:]...)
	buf = append(buf, kernel...)

	tmp, err := os.CreateTemp(c.Dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("gpu: kernel cache: %w", err)
	}
	_, werr := tmp.Write(buf)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("gpu: kernel cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.Path(key)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("gpu: kernel cache: %w", err)
	}
	return nil
}
