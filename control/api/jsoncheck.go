package api

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// checkJSON refuses what encoding/json lets through in a syntactically
// valid document but the API must not accept, naming where it is:
//
//   - a string (key or value) that is not valid UTF-8: encoding/json
//     silently replaces the bytes in a Go string and keeps them in a
//     json.RawMessage, which Postgres then refuses (SQLSTATE 22021);
//   - a \u0000 escape, or an unpaired UTF-16 surrogate escape: neither text
//     nor jsonb columns can store them;
//   - a key repeated in one object: encoding/json keeps the last value,
//     so a strict body would silently lose the first.
//
// loc is where the document sits ("body"). It returns nil for a document it
// cannot parse: the decoder has already reported those.
func checkJSON(loc string, raw []byte) *Problem {
	s := &jsonScan{b: raw}
	p, ok := s.value(loc)
	if !ok {
		return nil
	}
	return p
}

// jsonScan walks a JSON document byte by byte. ok=false from any method
// means the document is not valid JSON.
type jsonScan struct {
	b []byte
	i int
}

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *jsonScan) peek() (byte, bool) {
	s.ws()
	if s.i >= len(s.b) {
		return 0, false
	}
	return s.b[s.i], true
}

// value checks the value at s.i, located at loc.
func (s *jsonScan) value(loc string) (*Problem, bool) {
	c, ok := s.peek()
	if !ok {
		return nil, false
	}
	switch c {
	case '{':
		return s.object(loc)
	case '[':
		return s.array(loc)
	case '"':
		_, msg, ok := s.str()
		if !ok || msg == "" {
			return nil, ok
		}
		return malformed(loc, msg, nil), true
	}
	// A number or a literal: skip to the next delimiter.
	start := s.i
	for s.i < len(s.b) && !strings.ContainsRune(",]} \t\r\n", rune(s.b[s.i])) {
		s.i++
	}
	return nil, s.i > start
}

func (s *jsonScan) object(loc string) (*Problem, bool) {
	s.i++ // {
	if c, ok := s.peek(); !ok {
		return nil, false
	} else if c == '}' {
		s.i++
		return nil, true
	}
	seen := map[string]bool{}
	for {
		if c, ok := s.peek(); !ok || c != '"' {
			return nil, false
		}
		key, msg, ok := s.str()
		if !ok {
			return nil, false
		}
		if msg != "" {
			return malformed(loc, "has a key that "+msg, strings.ToValidUTF8(key, "\uFFFD")), true
		}
		kloc := loc + "." + key
		if seen[key] {
			return malformed(kloc, fmt.Sprintf("is sent twice: the key %q appears more than once in one object", key), nil), true
		}
		seen[key] = true
		if c, ok := s.peek(); !ok || c != ':' {
			return nil, false
		}
		s.i++
		if p, ok := s.value(kloc); p != nil || !ok {
			return p, ok
		}
		if more, ok := s.more('}'); !more || !ok {
			return nil, ok
		}
	}
}

func (s *jsonScan) array(loc string) (*Problem, bool) {
	s.i++ // [
	if c, ok := s.peek(); !ok {
		return nil, false
	} else if c == ']' {
		s.i++
		return nil, true
	}
	for n := 0; ; n++ {
		if p, ok := s.value(loc + "[" + strconv.Itoa(n) + "]"); p != nil || !ok {
			return p, ok
		}
		if more, ok := s.more(']'); !more || !ok {
			return nil, ok
		}
	}
}

// more reads the separator after an object member or an array element:
// more=true after a ',', false at the container's close.
func (s *jsonScan) more(close byte) (more, ok bool) {
	c, ok := s.peek()
	if !ok {
		return false, false
	}
	s.i++
	switch c {
	case ',':
		return true, true
	case close:
		return false, true
	default:
		return false, false
	}
}

// str reads the string at s.i and returns its decoded text (invalid bytes
// kept as they are) and, when it cannot be stored, why not ("" when it can).
func (s *jsonScan) str() (text, msg string, ok bool) {
	s.i++ // opening quote
	var b strings.Builder
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return b.String(), msg, true
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return "", "", false
			}
			e := s.b[s.i+1]
			s.i += 2
			if e != 'u' {
				b.WriteByte(unescape(e))
				continue
			}
			r, ok := s.hex4()
			if !ok {
				return "", "", false
			}
			switch {
			case r == 0:
				msg = cmpMsg(msg, `contains a NUL character (\u0000), which cannot be stored`)
			case utf16.IsSurrogate(r):
				r2 := utf8.RuneError
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					save := s.i
					s.i += 2
					if lo, ok := s.hex4(); ok {
						r2 = utf16.DecodeRune(r, lo)
					}
					if r2 == utf8.RuneError {
						s.i = save
					}
				}
				if r2 == utf8.RuneError {
					msg = cmpMsg(msg, "contains an unpaired UTF-16 surrogate escape, which cannot be stored")
				}
				r = r2
			}
			b.WriteRune(r)
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size <= 1 {
				msg = cmpMsg(msg, fmt.Sprintf("is not valid UTF-8 (byte 0x%02x at offset %d of the body)", c, s.i))
			}
			b.Write(s.b[s.i : s.i+size])
			s.i += size
		}
	}
	return "", "", false
}

// cmpMsg keeps the first problem found in a string.
func cmpMsg(have, next string) string {
	if have != "" {
		return have
	}
	return next
}

func (s *jsonScan) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(n), true
}

func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // " \ /
}
