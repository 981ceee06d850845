package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// machines maps the architectures the image is built for to their ELF machine.
var machines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkStatic returns nil when bin is a static Linux executable for p: on an
// empty base there is no dynamic loader and no libc, so anything else would
// fail at its first exec with a bare "no such file or directory".
func checkStatic(bin []byte, p v1.Platform) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	want, ok := machines[p.Architecture]
	if !ok || p.OS != "linux" {
		return fmt.Errorf("platform %s is not one of linux/amd64, linux/arm64", p)
	}
	if f.Machine != want || f.Type != elf.ET_EXEC {
		return fmt.Errorf("an ELF %s for %s, want an executable (ET_EXEC) for %s", f.Type, f.Machine, want)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (it names an interpreter): build it with CGO_ENABLED=0")
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("dynamically linked against %v: build it with CGO_ENABLED=0", libs)
	}
	return nil
}
