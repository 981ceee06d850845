package api

import (
	"strconv"

	"github.com/danielgtaylor/huma/v2"
	"github.com/gofiber/fiber/v2"

	"github.com/convergeplane/converge/control/store"
)

// HeaderConsistentRead is the request header that asks a GET or HEAD to
// read from the primary (DATABASE_URL) rather than the read pool
// (DATABASE_READ_URL), which may lag: "true" or "false" (the default).
const HeaderConsistentRead = "Consistent-Read"

// readPool is the middleware that lets a GET or HEAD under Prefix read
// from the store's read pool (store.PreferReadPool), unless it sends
// Consistent-Read: true; every other method writes, and reads back what
// it wrote, on the primary. A Consistent-Read that is not a boolean is a
// 400 naming it.
func readPool(c *fiber.Ctx) error {
	if c.Method() != fiber.MethodGet && c.Method() != fiber.MethodHead {
		return c.Next()
	}
	consistent := false
	if v := c.Get(HeaderConsistentRead); v != "" {
		var err error
		if consistent, err = strconv.ParseBool(v); err != nil {
			return writeProblem(c, malformed("header."+HeaderConsistentRead, "must be true or false", v))
		}
	}
	if !consistent {
		c.SetUserContext(store.PreferReadPool(c.UserContext()))
	}
	return c.Next()
}

// consistentReadParam documents Consistent-Read on a GET operation; the
// readPool middleware reads it, not the handler.
func consistentReadParam() *huma.Param {
	return &huma.Param{Name: HeaderConsistentRead, In: "header",
		Description: "true: read from the primary database. Without it a server with a read replica (DATABASE_READ_URL) " +
			"may answer from the replica, which can lag a write just made; a write always answers from the primary.",
		Schema: &huma.Schema{Type: huma.TypeBoolean}}
}
