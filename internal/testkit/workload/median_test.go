package workload_test

import (
	"testing"

	"github.com/convergeplane/converge/internal/testkit/workload"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := workload.Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
