-- information leak: vectorParseSqliteText copies an element into valueBuf[1025] and checks
-- iBuf > MAX_FLOAT_CHAR_SZ (1024) before each write, so a 1,025-character element fills the
-- buffer with no terminator; the error message ("float string length exceeded 1024
-- characters: '%s'") then reads past it on the stack until a zero byte and sends those
-- bytes to the client (5 bytes seen, part of an address). No crash: the fuzzer cannot see it.
SELECT vector32('[' || printf('%.*c', 1100, '1') || ']');
