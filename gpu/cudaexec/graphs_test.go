package cudaexec

import (
	"reflect"
	"testing"
)

func TestVLLMBucketsDefault(t *testing.T) {
	b := VLLMBuckets(DefaultMaxGraphBatch)
	// [1, 2, 4] + 8..248 step 8 (31 sizes) + 256..512 step 16 (17 sizes).
	if len(b) != 3+31+17 {
		t.Fatalf("%d buckets: %v", len(b), b)
	}
	if !reflect.DeepEqual([]int(b[:6]), []int{1, 2, 4, 8, 16, 24}) {
		t.Errorf("head = %v", b[:6])
	}
	if !reflect.DeepEqual([]int(b[33:37]), []int{248, 256, 272, 288}) {
		t.Errorf("around 256 = %v", b[33:37])
	}
	if b.Max() != 512 {
		t.Errorf("Max = %d", b.Max())
	}
	for i := 1; i < len(b); i++ {
		if b[i] <= b[i-1] {
			t.Fatalf("not ascending at %d: %v", i, b)
		}
	}
}

func TestVLLMBucketsSmallCaps(t *testing.T) {
	tests := []struct {
		max  int
		want []int
	}{
		{0, nil},
		{1, []int{1}},
		{3, []int{1, 2}},
		{8, []int{1, 2, 4, 8}},
		{20, []int{1, 2, 4, 8, 16}},
		{260, nil}, // checked below: ends 248, 256
	}
	for _, tc := range tests {
		got := VLLMBuckets(tc.max)
		if tc.max == 260 {
			if n := len(got); got[n-2] != 248 || got[n-1] != 256 {
				t.Errorf("VLLMBuckets(260) tail = %v", got[n-2:])
			}
			continue
		}
		if !reflect.DeepEqual([]int(got), tc.want) {
			t.Errorf("VLLMBuckets(%d) = %v, want %v", tc.max, got, tc.want)
		}
	}
}

func TestBucket(t *testing.T) {
	b := VLLMBuckets(DefaultMaxGraphBatch)
	tests := []struct {
		batch, size int
		ok          bool
	}{
		{-1, 0, false},
		{0, 0, false},
		{1, 1, true},
		{2, 2, true},
		{3, 4, true},
		{4, 4, true},
		{5, 8, true},
		{9, 16, true},
		{248, 248, true},
		{249, 256, true},
		{257, 272, true},
		{511, 512, true},
		{512, 512, true},
		{513, 0, false},
	}
	for _, tc := range tests {
		size, ok := b.Bucket(tc.batch)
		if size != tc.size || ok != tc.ok {
			t.Errorf("Bucket(%d) = %d, %v; want %d, %v", tc.batch, size, ok, tc.size, tc.ok)
		}
	}
	if _, ok := Buckets(nil).Bucket(1); ok {
		t.Error("empty Buckets gave a bucket")
	}
}

func TestNewBuckets(t *testing.T) {
	b, err := NewBuckets([]int{16, 1, 4})
	if err != nil || !reflect.DeepEqual([]int(b), []int{1, 4, 16}) {
		t.Fatalf("NewBuckets = %v, %v", b, err)
	}
	if s, ok := b.Bucket(5); !ok || s != 16 {
		t.Errorf("Bucket(5) = %d, %v", s, ok)
	}
	for _, bad := range [][]int{{0, 1}, {-2}, {4, 4}} {
		if _, err := NewBuckets(bad); err == nil {
			t.Errorf("NewBuckets(%v) accepted", bad)
		}
	}
}
