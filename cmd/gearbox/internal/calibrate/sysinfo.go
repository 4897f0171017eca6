package calibrate

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// cpuName is the processor's model name as /proc/cpuinfo gives it, or
// the architecture where the OS does not say.
func cpuName() string {
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				if v = strings.TrimSpace(v); v != "" {
					return v
				}
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH + " CPU"
}

// memoryBytes is the machine's physical memory (MemTotal of
// /proc/meminfo).
func memoryBytes() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("calibrate: memory size: %w (set Options.MemoryBytes)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil || kb <= 0 {
				break
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("calibrate: memory size: no MemTotal in /proc/meminfo (set Options.MemoryBytes)")
}

// lastLevelCache is the size of the largest cache of CPU 0 that sysfs
// lists, bytes; 0 when sysfs does not say.
func lastLevelCache() float64 {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu0/cache/index*")
	best := 0.0
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "size"))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(data))
		mult := 1.0
		switch {
		case strings.HasSuffix(s, "K"):
			mult, s = 1<<10, strings.TrimSuffix(s, "K")
		case strings.HasSuffix(s, "M"):
			mult, s = 1<<20, strings.TrimSuffix(s, "M")
		}
		if v, err := strconv.ParseFloat(s, 64); err == nil && v*mult > best {
			best = v * mult
		}
	}
	return best
}

// loadAverage describes /proc/loadavg's one-minute load against the
// cores, or says it is unknown.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load average unknown"
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return "load average unknown"
	}
	return fmt.Sprintf("load average %s on %d cores", fields[0], runtime.NumCPU())
}
