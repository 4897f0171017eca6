package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// IndexName is the file that maps tensor names to shard files in a sharded
// model directory.
const IndexName = "model.safetensors.index.json"

// SingleName is the weights file of an unsharded model directory.
const SingleName = "model.safetensors"

// Set is the tensors of a model: one or more files whose tensor names are
// disjoint. It owns its files and closes them on Close.
type Set struct {
	files   []*File
	tensors map[string]*Tensor
	names   []string // sorted
}

// NewSet combines files into a Set, which takes ownership of them. A
// tensor name present in two files is an error matching ErrInvalid; the
// files are not closed on error.
func NewSet(files ...*File) (*Set, error) {
	s := &Set{files: slices.Clone(files), tensors: make(map[string]*Tensor)}
	for _, f := range files {
		for _, t := range f.tensors {
			if prev, ok := s.tensors[t.Name]; ok {
				return nil, fmt.Errorf("safetensors: %w: tensor %q is in both %s and %s", ErrInvalid, t.Name, prev.file, t.file)
			}
			s.tensors[t.Name] = t
			s.names = append(s.names, t.Name)
		}
	}
	sort.Strings(s.names)
	return s, nil
}

// OpenDir opens the safetensors weights of a model directory:
//   - if model.safetensors.index.json exists, the files its weight_map
//     names; the index must agree exactly with the files' contents (every
//     listed tensor in the listed file, no unlisted tensors);
//   - otherwise model.safetensors if it exists;
//   - otherwise every *.safetensors file in dir, in name order.
//
// A name in two files is an error. Errors match ErrInvalid for bad content
// and fs.ErrNotExist when no weights are found.
func OpenDir(dir string) (*Set, error) {
	indexPath := filepath.Join(dir, IndexName)
	switch _, err := os.Stat(indexPath); {
	case err == nil:
		return openIndexed(dir, indexPath)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	single := filepath.Join(dir, SingleName)
	switch _, err := os.Stat(single); {
	case err == nil:
		return openFiles([]string{single})
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("safetensors: no %s, %s or *.safetensors in %s: %w", IndexName, SingleName, dir, fs.ErrNotExist)
	}
	sort.Strings(paths)
	return openFiles(paths)
}

// openFiles opens paths into a Set, closing what it opened on failure.
func openFiles(paths []string) (*Set, error) {
	files := make([]*File, 0, len(paths))
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			closeAll()
			return nil, err
		}
		files = append(files, f)
	}
	s, err := NewSet(files...)
	if err != nil {
		closeAll()
		return nil, err
	}
	return s, nil
}

// readIndex reads a weight_map and returns it with its distinct shard
// files in name order.
func readIndex(indexPath string) (weightMap map[string]string, shards []string, err error) {
	fd, err := os.Open(indexPath)
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	defer fd.Close()
	data, err := io.ReadAll(io.LimitReader(fd, MaxHeaderSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("safetensors: %w", err)
	}
	if len(data) > MaxHeaderSize {
		return nil, nil, fmt.Errorf("safetensors: %s: %w: larger than %d bytes", indexPath, ErrInvalid, MaxHeaderSize)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, nil, fmt.Errorf("safetensors: %s: %w: %w", indexPath, ErrInvalid, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, nil, fmt.Errorf("safetensors: %s: %w: no weight_map entries", indexPath, ErrInvalid)
	}
	seen := make(map[string]bool)
	for _, name := range slices.Sorted(maps.Keys(index.WeightMap)) {
		shard := index.WeightMap[name]
		if !filepath.IsLocal(filepath.FromSlash(shard)) {
			return nil, nil, fmt.Errorf("safetensors: %s: %w: tensor %q maps to %q, which is not a file inside the directory", indexPath, ErrInvalid, name, shard)
		}
		if !seen[shard] {
			seen[shard] = true
			shards = append(shards, shard)
		}
	}
	slices.Sort(shards)
	return index.WeightMap, shards, nil
}

// openIndexed opens the shards named by an index and checks that the
// index and the shards agree.
func openIndexed(dir, indexPath string) (*Set, error) {
	weightMap, shards, err := readIndex(indexPath)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(shards))
	for i, shard := range shards {
		paths[i] = filepath.Join(dir, filepath.FromSlash(shard))
	}
	s, err := openFiles(paths)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(weightMap)) {
		shard := weightMap[name]
		t, ok := s.tensors[name]
		want := filepath.Join(dir, filepath.FromSlash(shard))
		if !ok || t.file != want {
			s.Close()
			return nil, fmt.Errorf("safetensors: %s: %w: weight_map puts tensor %q in %s, which does not contain it", indexPath, ErrInvalid, name, shard)
		}
	}
	if len(s.tensors) != len(weightMap) {
		for _, name := range s.names {
			if _, ok := weightMap[name]; !ok {
				file := s.tensors[name].file
				s.Close()
				return nil, fmt.Errorf("safetensors: %s: %w: tensor %q in %s is missing from weight_map", indexPath, ErrInvalid, name, file)
			}
		}
	}
	return s, nil
}

// Tensor returns the named tensor.
func (s *Set) Tensor(name string) (*Tensor, bool) {
	t, ok := s.tensors[name]
	return t, ok
}

// Names returns every tensor name in the Set, sorted, in a new slice.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Files returns the Set's files in the order they were given or opened.
func (s *Set) Files() []*File { return slices.Clone(s.files) }

// Close closes every file of the Set and returns the first error.
func (s *Set) Close() error {
	var first error
	for _, f := range s.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
