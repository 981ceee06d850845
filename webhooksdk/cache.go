package webhooksdk

import (
	"container/list"
	"time"
)

// resultCache keeps finished result bodies by webhook-id, bounded by entry count, total
// bytes and age, evicting the least recently stored first. Not safe for concurrent use;
// the Endpoint guards it with its mutex.
type resultCache struct {
	maxEntries int
	maxBytes   int
	ttl        time.Duration

	bytes int
	order *list.List // of *cacheEntry, newest at the front
	byID  map[string]*list.Element
}

type cacheEntry struct {
	id      string
	body    []byte
	expires time.Time
}

func newResultCache(maxEntries, maxBytes int, ttl time.Duration) *resultCache {
	return &resultCache{
		maxEntries: maxEntries,
		maxBytes:   maxBytes,
		ttl:        ttl,
		order:      list.New(),
		byID:       make(map[string]*list.Element),
	}
}

// get returns the body stored for id, if present and not expired.
func (c *resultCache) get(id string, now time.Time) ([]byte, bool) {
	el, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) {
		c.remove(el)
		return nil, false
	}
	return e.body, true
}

// put stores body under id and evicts what no longer fits.
func (c *resultCache) put(id string, body []byte, now time.Time) {
	if el, ok := c.byID[id]; ok {
		c.remove(el)
	}
	if len(body) > c.maxBytes {
		return
	}
	c.byID[id] = c.order.PushFront(&cacheEntry{id: id, body: body, expires: now.Add(c.ttl)})
	c.bytes += len(body)
	for c.order.Len() > 0 {
		back := c.order.Back()
		e := back.Value.(*cacheEntry)
		if c.order.Len() <= c.maxEntries && c.bytes <= c.maxBytes && now.Before(e.expires) {
			break
		}
		c.remove(back)
	}
}

func (c *resultCache) remove(el *list.Element) {
	e := c.order.Remove(el).(*cacheEntry)
	delete(c.byID, e.id)
	c.bytes -= len(e.body)
}

func (c *resultCache) len() int { return c.order.Len() }
