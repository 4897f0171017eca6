package gpu

import (
	"encoding/binary"
	"errors"
	"os"
	"reflect"
	"testing"
)

func archFlags(arch string) uint32 {
	switch arch {
	case "amd64":
		return 0x0303
	case "arm64":
		return 0x0a03
	}
	return 0x0003
}

// newLdCache builds a cache in glibc's new format.
func newLdCache(entries []CacheEntry) []byte {
	n := len(entries)
	strStart := ldNewHeaderSize + n*ldNewEntrySize
	var strs []byte
	add := func(s string) uint32 {
		off := uint32(strStart + len(strs))
		strs = append(append(strs, s...), 0)
		return off
	}
	buf := make([]byte, strStart)
	copy(buf, ldCacheNewMagic)
	binary.LittleEndian.PutUint32(buf[20:], uint32(n))
	buf[28] = 2 // little-endian
	for i, e := range entries {
		b := buf[ldNewHeaderSize+i*ldNewEntrySize:]
		binary.LittleEndian.PutUint32(b[0:], archFlags(e.Arch))
		binary.LittleEndian.PutUint32(b[4:], add(e.Name))
		binary.LittleEndian.PutUint32(b[8:], add(e.Path))
	}
	binary.LittleEndian.PutUint32(buf[24:], uint32(len(strs)))
	return append(buf, strs...)
}

// oldLdCache builds a cache in the old ld.so-1.7.0 format; strings are
// relative to the end of the entry table.
func oldLdCache(entries []CacheEntry) []byte {
	n := len(entries)
	var strs []byte
	add := func(s string) uint32 {
		off := uint32(len(strs))
		strs = append(append(strs, s...), 0)
		return off
	}
	buf := make([]byte, ldOldHeaderSize+n*ldOldEntrySize)
	copy(buf, ldCacheOldMagic)
	binary.LittleEndian.PutUint32(buf[12:], uint32(n))
	for i, e := range entries {
		b := buf[ldOldHeaderSize+i*ldOldEntrySize:]
		binary.LittleEndian.PutUint32(b[0:], archFlags(e.Arch))
		binary.LittleEndian.PutUint32(b[4:], add(e.Name))
		binary.LittleEndian.PutUint32(b[8:], add(e.Path))
	}
	return append(buf, strs...)
}

// compatLdCache is an old table with no strings of its own, padded to 8
// bytes, followed by a new-format table: the layout ldconfig writes with
// -c compat.
func compatLdCache(oldEntries, newEntries []CacheEntry) []byte {
	buf := make([]byte, ldOldHeaderSize+len(oldEntries)*ldOldEntrySize)
	copy(buf, ldCacheOldMagic)
	binary.LittleEndian.PutUint32(buf[12:], uint32(len(oldEntries)))
	for len(buf)%8 != 0 {
		buf = append(buf, 0)
	}
	return append(buf, newLdCache(newEntries)...)
}

var sampleEntries = []CacheEntry{
	{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "amd64"},
	{"libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2", "amd64"},
	{"libc.so.6", "/lib/i386-linux-gnu/libc.so.6", ""},
	{"libcuda.so.1", "/usr/lib/aarch64-linux-gnu/libcuda.so.1", "arm64"},
}

func TestParseLdCacheFormats(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want []CacheEntry
	}{
		{"new", newLdCache(sampleEntries), sampleEntries},
		{"old", oldLdCache(sampleEntries), sampleEntries},
		{"compat uses the new table", compatLdCache(sampleEntries[:3], sampleEntries), sampleEntries},
		{"compat with odd old count", compatLdCache(sampleEntries[:1], sampleEntries[1:]), sampleEntries[1:]},
		{"empty new", newLdCache(nil), []CacheEntry{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLdCache(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestParseLdCacheMalformed(t *testing.T) {
	good := newLdCache(sampleEntries)
	badOffset := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(badOffset[ldNewHeaderSize+4:], 1<<30)
	unterminated := append([]byte(nil), good[:len(good)-1]...)
	tooMany := append([]byte(nil), good...)
	binary.LittleEndian.PutUint32(tooMany[20:], 1<<20)
	oldTooMany := oldLdCache(sampleEntries)
	binary.LittleEndian.PutUint32(oldTooMany[12:], 1<<20)
	bigEndian := append([]byte(nil), good...)
	bigEndian[28] = 3
	tests := map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("not a cache at all, not at all"),
		"short new":      good[:30],
		"short old":      []byte(ldCacheOldMagic),
		"bad offset":     badOffset,
		"unterminated":   unterminated,
		"entry overrun":  tooMany,
		"old overrun":    oldTooMany,
		"big-endian new": bigEndian,
	}
	for name, data := range tests {
		if _, err := ParseLdCache(data); !errors.Is(err, errLdCache) {
			t.Errorf("%s: err = %v, want errLdCache", name, err)
		}
	}
}

func TestParseLdCacheRealFile(t *testing.T) {
	data, err := os.ReadFile(LdCachePath)
	if err != nil {
		t.Skip("no loader cache:", err)
	}
	entries, err := ParseLdCache(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == "libc.so.6" {
			return
		}
	}
	t.Errorf("libc.so.6 not among %d entries", len(entries))
}

func TestParseLdconfig(t *testing.T) {
	out := []byte(`1234 libs found in cache ` + "`/etc/ld.so.cache'" + `
	libcuda.so.1 (libc6,x86-64) => /usr/local/nvidia/lib64/libcuda.so.1
	libcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1
	libnccl.so.2 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libnccl.so.2
	libz.so.1 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libz.so.1
Cache generated by: ldconfig (GNU libc) stable release version 2.39
`)
	want := []CacheEntry{
		{"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1", "amd64"},
		{"libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", ""},
		{"libnccl.so.2", "/usr/lib/aarch64-linux-gnu/libnccl.so.2", "arm64"},
		{"libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", "amd64"},
	}
	if got := ParseLdconfig(out); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

func TestCacheEntryMatchesArch(t *testing.T) {
	tests := []struct {
		entry, goarch string
		want          bool
	}{
		{"amd64", "amd64", true},
		{"", "amd64", false},
		{"arm64", "amd64", false},
		{"arm64", "arm64", true},
		{"", "riscv64", true},
	}
	for _, tc := range tests {
		if got := (CacheEntry{Arch: tc.entry}).matchesArch(tc.goarch); got != tc.want {
			t.Errorf("entry %q on %s = %v, want %v", tc.entry, tc.goarch, got, tc.want)
		}
	}
}
