package calibrate

import (
	"context"
	"os"
	"testing"
)

func TestMeasureQuick(t *testing.T) {
	p, err := Measure(context.Background(), Options{Quick: true, Log: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	g, err := p.GPU()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", g)
}
