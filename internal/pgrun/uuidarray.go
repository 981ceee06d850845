package pgrun

import "strings"

// UUIDArray writes ids, UUIDs in their text form as read from the
// database, as a uuid[] literal ("{a,b}"; an empty string is NULL). Go
// strings are sent in the text format, which PostgreSQL parses as the
// parameter's type. A []string argument for a uuid[] parameter is sent as
// text too, but only after pgx has tried the binary format, failed, and
// formatted the whole array into an error it then drops: work for nothing
// on every claim, request and completion of the dispatcher.
func UUIDArray(ids []string) string {
	var b strings.Builder
	b.Grow(2 + 37*len(ids))
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		if id == "" {
			b.WriteString("NULL")
			continue
		}
		b.WriteString(id)
	}
	b.WriteByte('}')
	return b.String()
}
