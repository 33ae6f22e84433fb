package frontend

// DataLen is the number of blob bytes the chunk carries, for the storage
// traffic metrics (they see the messages the Read handler sends).
func (c *pooledChunk) DataLen() int { return len(c.data) }
