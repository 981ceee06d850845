// Package peers is the peer benchmark (make bench-peers): River beside the
// engine on the same PostgreSQL server. Its own module, so that River never
// becomes a dependency of the product.
package peers
