package gpu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// CacheEntry is one library in the dynamic loader's cache.
type CacheEntry struct {
	Name string // soname, e.g. "libcuda.so.1"
	Path string // absolute path of the file
	Arch string // "amd64", "arm64", or "" for any other ABI
}

func (e CacheEntry) matchesArch(goarch string) bool {
	switch goarch {
	case "amd64", "arm64":
		return e.Arch == goarch
	}
	return true
}

// Loader cache layouts, from glibc's sysdeps/generic/dl-cache.h.
const (
	ldCacheOldMagic = "ld.so-1.7.0"
	ldCacheNewMagic = "glibc-ld.so.cache1.1"

	ldOldHeaderSize = 16 // magic[11], pad, nlibs uint32
	ldOldEntrySize  = 12 // flags int32, key, value uint32
	ldNewHeaderSize = 48 // magic+version[20], nlibs, len_strings, flags u8, pad[3], ext offset, unused[3]
	ldNewEntrySize  = 24 // flags int32, key, value, osversion uint32, hwcap uint64

	ldFlagArchMask   = 0xff00
	ldFlagX8664Lib64 = 0x0300
	ldFlagAArch64    = 0x0a00

	ldNewFlagsBigEndian = 3 // cache_file_new.flags: endianness recorded as big
)

var errLdCache = errors.New("gpu: malformed loader cache")

// ParseLdCache parses the contents of /etc/ld.so.cache in glibc's new format
// ("glibc-ld.so.cache1.1"), its old format ("ld.so-1.7.0"), or the
// compatibility layout (old table followed by a new one, which is used).
// Only little-endian caches are read.
func ParseLdCache(data []byte) ([]CacheEntry, error) {
	if bytes.HasPrefix(data, []byte(ldCacheNewMagic)) {
		return parseLdCacheNew(data)
	}
	if !bytes.HasPrefix(data, []byte(ldCacheOldMagic)) {
		return nil, fmt.Errorf("%w: unknown magic", errLdCache)
	}
	if len(data) < ldOldHeaderSize {
		return nil, fmt.Errorf("%w: short old header", errLdCache)
	}
	n := uint64(binary.LittleEndian.Uint32(data[12:16]))
	end := uint64(ldOldHeaderSize) + n*ldOldEntrySize
	if end > uint64(len(data)) {
		return nil, fmt.Errorf("%w: %d old entries overrun %d bytes", errLdCache, n, len(data))
	}
	if newStart := (end + 7) &^ 7; newStart < uint64(len(data)) && bytes.HasPrefix(data[newStart:], []byte(ldCacheNewMagic)) {
		return parseLdCacheNew(data[newStart:])
	}
	strtab := data[end:]
	entries := make([]CacheEntry, 0, n)
	for i := uint64(0); i < n; i++ {
		e := data[ldOldHeaderSize+i*ldOldEntrySize:]
		flags := binary.LittleEndian.Uint32(e[0:4])
		name, err := cString(strtab, binary.LittleEndian.Uint32(e[4:8]))
		if err != nil {
			return nil, err
		}
		path, err := cString(strtab, binary.LittleEndian.Uint32(e[8:12]))
		if err != nil {
			return nil, err
		}
		entries = append(entries, CacheEntry{Name: name, Path: path, Arch: archFromFlags(flags)})
	}
	return entries, nil
}

// parseLdCacheNew parses a new-format table; string offsets are relative
// to the start of its header.
func parseLdCacheNew(data []byte) ([]CacheEntry, error) {
	if len(data) < ldNewHeaderSize {
		return nil, fmt.Errorf("%w: short new header", errLdCache)
	}
	if data[28] == ldNewFlagsBigEndian {
		return nil, fmt.Errorf("%w: big-endian cache", errLdCache)
	}
	n := uint64(binary.LittleEndian.Uint32(data[20:24]))
	if uint64(ldNewHeaderSize)+n*ldNewEntrySize > uint64(len(data)) {
		return nil, fmt.Errorf("%w: %d entries overrun %d bytes", errLdCache, n, len(data))
	}
	entries := make([]CacheEntry, 0, n)
	for i := uint64(0); i < n; i++ {
		e := data[ldNewHeaderSize+i*ldNewEntrySize:]
		flags := binary.LittleEndian.Uint32(e[0:4])
		name, err := cString(data, binary.LittleEndian.Uint32(e[4:8]))
		if err != nil {
			return nil, err
		}
		path, err := cString(data, binary.LittleEndian.Uint32(e[8:12]))
		if err != nil {
			return nil, err
		}
		entries = append(entries, CacheEntry{Name: name, Path: path, Arch: archFromFlags(flags)})
	}
	return entries, nil
}

func cString(tab []byte, off uint32) (string, error) {
	if uint64(off) >= uint64(len(tab)) {
		return "", fmt.Errorf("%w: string offset %d outside %d bytes", errLdCache, off, len(tab))
	}
	s := tab[off:]
	i := bytes.IndexByte(s, 0)
	if i < 0 {
		return "", fmt.Errorf("%w: unterminated string at %d", errLdCache, off)
	}
	return string(s[:i]), nil
}

func archFromFlags(flags uint32) string {
	switch flags & ldFlagArchMask {
	case ldFlagX8664Lib64:
		return "amd64"
	case ldFlagAArch64:
		return "arm64"
	}
	return ""
}

// ParseLdconfig parses `ldconfig -p` output, whose entry lines read
//
//	libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
//
// Other lines (the "N libs found in cache" header) are skipped.
func ParseLdconfig(out []byte) []CacheEntry {
	var entries []CacheEntry
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		left, path, ok := strings.Cut(sc.Text(), " => ")
		if !ok {
			continue
		}
		left = strings.TrimSpace(left)
		name, desc, _ := strings.Cut(left, " ")
		if name == "" {
			continue
		}
		arch := ""
		switch {
		case strings.Contains(desc, "x86-64"):
			arch = "amd64"
		case strings.Contains(desc, "AArch64"):
			arch = "arm64"
		}
		entries = append(entries, CacheEntry{Name: name, Path: strings.TrimSpace(path), Arch: arch})
	}
	return entries
}
