package table

import "strings"

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = 16384

// crcTable is the CRC-16/XMODEM table (polynomial 0x1021) that Redis Cluster
// uses to map keys to slots.
var crcTable = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// SlotOf returns the cluster hash slot of key, honouring {hash tags}.
func SlotOf(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
	}
	return crc % SlotCount
}
