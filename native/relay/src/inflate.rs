//! A response body's gzip or deflate coding undone to be read (the twin of
//! `streams.Inflater` and, for a whole body, of `codings.inflate`): fed as it comes and read
//! back in pieces of some 32 KiB, so what it holds at once is bounded however far its bytes
//! inflate (a decompression bomb's pieces meet the readers' bounds as an identity body's bytes
//! would). gzip may come as several members; deflate as zlib data or raw (as some servers send
//! it), told by its first two bytes. After the data (gzip's last member) only zero bytes may
//! come, as `gzip -d` and Python's gzip take padding: anything else is BadCoding, the rule of
//! `codings.inflate` and `streams.Inflater` too.

use std::io::Write;

use bytes::Bytes;
use flate2::write::{DeflateDecoder, GzDecoder, ZlibDecoder};
use hyper::header::HeaderMap;

/// Bytes not of their coding (or, for a whole body, more than its limit once inflated).
#[derive(Debug, PartialEq, Eq)]
pub struct BadCoding;

/// A response's content coding, as the relay reads it (its `Content-Encoding`, the first one
/// named, as aiohttp's `headers.get` gives it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Identity,
    Gzip,
    Deflate,
    /// One the relay cannot read (`br`, `zstd`, a list of codings...).
    Other,
}

impl Coding {
    pub fn of(headers: &HeaderMap) -> Coding {
        let Some(value) = headers.get("content-encoding") else {
            return Coding::Identity;
        };
        let Ok(value) = value.to_str() else {
            return Coding::Other;
        };
        Coding::parse(value)
    }

    pub fn parse(value: &str) -> Coding {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "identity" => Coding::Identity,
            "gzip" => Coding::Gzip,
            "deflate" => Coding::Deflate,
            _ => Coding::Other,
        }
    }

    /// Whether the relay inflates it to read it.
    pub fn inflated(self) -> bool {
        matches!(self, Coding::Gzip | Coding::Deflate)
    }
}

enum Decoder {
    Gzip(GzDecoder<Vec<u8>>),
    Zlib(ZlibDecoder<Vec<u8>>),
    Raw(DeflateDecoder<Vec<u8>>),
}

impl Decoder {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Decoder::Gzip(decoder) => decoder,
            Decoder::Zlib(decoder) => decoder,
            Decoder::Raw(decoder) => decoder,
        }
    }

    fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Decoder::Gzip(decoder) => decoder.get_mut(),
            Decoder::Zlib(decoder) => decoder.get_mut(),
            Decoder::Raw(decoder) => decoder.get_mut(),
        }
    }

    fn finish(&mut self) -> std::io::Result<()> {
        match self {
            Decoder::Gzip(decoder) => decoder.try_finish(),
            Decoder::Zlib(decoder) => decoder.try_finish(),
            Decoder::Raw(decoder) => decoder.try_finish(),
        }
    }
}

/// A gzip or deflate body inflated as it comes: `push` its bytes, then take its pieces with
/// `next` until None.
pub struct Inflater {
    gzip: bool,
    decoder: Option<Decoder>,
    /// The bytes pushed and not yet inflated (deflate's: until its first two have come).
    pending: Bytes,
    /// The data has ended (a gzip member, or the deflate data) with nothing begun after it.
    ended: bool,
    /// The data has ended and zero bytes followed: only zero bytes may come.
    padding: bool,
}

impl Inflater {
    pub fn new(coding: Coding) -> Self {
        Inflater {
            gzip: coding == Coding::Gzip,
            decoder: None,
            pending: Bytes::new(),
            ended: false,
            padding: false,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.pending = if self.pending.is_empty() {
            Bytes::copy_from_slice(data)
        } else {
            [&self.pending[..], data].concat().into()
        };
    }

    /// The next piece inflated of what was pushed (None: all of it read so far).
    pub fn next(&mut self) -> Result<Option<Vec<u8>>, BadCoding> {
        loop {
            if self.pending.is_empty() {
                return Ok(None);
            }
            if self.padding || (self.ended && (!self.gzip || self.pending[0] == 0)) {
                // past the end of the data: zero padding, or bytes of no coding
                if self.pending.iter().any(|&byte| byte != 0) {
                    return Err(BadCoding);
                }
                self.padding = true;
                self.pending = Bytes::new();
                return Ok(None);
            }
            let decoder = match self.decoder.as_mut() {
                Some(decoder) => decoder,
                None => {
                    let pending = &self.pending;
                    let decoder = if pending.len() < 2 {
                        return Ok(None); // (a member, or which deflate it is: told by two bytes)
                    } else if self.gzip {
                        if pending[..2] != [0x1f, 0x8b] {
                            return Err(BadCoding); // no gzip member (zlib says so at once too)
                        }
                        Decoder::Gzip(GzDecoder::new(Vec::new()))
                    } else if pending[0] & 0x0f == 8
                        && (u16::from(pending[0]) << 8 | u16::from(pending[1])) % 31 == 0
                    {
                        Decoder::Zlib(ZlibDecoder::new(Vec::new()))
                    } else {
                        Decoder::Raw(DeflateDecoder::new(Vec::new()))
                    };
                    self.ended = false; // (gzip: its next member has begun)
                    self.decoder.insert(decoder)
                }
            };
            let taken = decoder
                .writer()
                .write(&self.pending)
                .map_err(|_| BadCoding)?;
            if taken == 0 {
                // the data has ended (a gzip member with its trailer checked): what follows is
                // judged at the top of the loop
                decoder.finish().map_err(|_| BadCoding)?;
                let out = std::mem::take(decoder.output());
                self.decoder = None;
                self.ended = true;
                if !out.is_empty() {
                    return Ok(Some(out));
                }
                continue;
            }
            self.pending = self.pending.slice(taken..);
            decoder.writer().flush().map_err(|_| BadCoding)?;
            let out = std::mem::take(decoder.output());
            if !out.is_empty() {
                return Ok(Some(out));
            }
        }
    }

    /// The body has ended: BadCoding if its data had not (cut short, or no data at all).
    pub fn finish(&mut self) -> Result<Vec<u8>, BadCoding> {
        if !self.pending.is_empty() {
            return Err(BadCoding); // (a byte held to tell what comes: cut short)
        }
        let Some(decoder) = self.decoder.as_mut() else {
            return if self.ended {
                Ok(Vec::new())
            } else {
                Err(BadCoding)
            };
        };
        decoder.finish().map_err(|_| BadCoding)?;
        Ok(std::mem::take(decoder.output()))
    }
}

/// A whole body inflated, at most `limit` bytes (`codings.inflate`'s twin).
pub fn inflate_whole(data: &[u8], coding: Coding, limit: usize) -> Result<Vec<u8>, BadCoding> {
    if !coding.inflated() {
        return if coding == Coding::Identity && data.len() <= limit {
            Ok(data.to_vec())
        } else {
            Err(BadCoding)
        };
    }
    let mut inflater = Inflater::new(coding);
    inflater.push(data);
    let mut out = Vec::new();
    while let Some(piece) = inflater.next()? {
        out.extend_from_slice(&piece);
        if out.len() > limit {
            return Err(BadCoding);
        }
    }
    out.extend_from_slice(&inflater.finish()?);
    if out.len() > limit {
        return Err(BadCoding);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn pieces_are_bounded_and_whole() {
        let data = vec![b'a'; 10_000_000];
        let mut inflater = Inflater::new(Coding::Gzip);
        let compressed = gzip(&data);
        let mut out = Vec::new();
        for part in compressed.chunks(7) {
            inflater.push(part);
            while let Some(piece) = inflater.next().unwrap() {
                assert!(piece.len() <= 256 * 1024, "{}", piece.len());
                out.extend_from_slice(&piece);
            }
        }
        assert_eq!(out, data);
        assert_eq!(
            inflate_whole(&compressed, Coding::Gzip, 10_000_000).unwrap(),
            data
        );
        assert_eq!(
            inflate_whole(&compressed, Coding::Gzip, 9_999_999),
            Err(BadCoding)
        );
        assert_eq!(
            inflate_whole(&compressed[..100], Coding::Gzip, 10_000_000),
            Err(BadCoding)
        );
    }

    #[test]
    fn two_members_and_both_deflates() {
        let mut two = gzip(b"one ");
        two.extend_from_slice(&gzip(b"two"));
        assert_eq!(inflate_whole(&two, Coding::Gzip, 100).unwrap(), b"one two");
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(b"zlib").unwrap();
        assert_eq!(
            inflate_whole(&zlib.finish().unwrap(), Coding::Deflate, 100).unwrap(),
            b"zlib"
        );
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), Compression::default());
        raw.write_all(b"raw").unwrap();
        assert_eq!(
            inflate_whole(&raw.finish().unwrap(), Coding::Deflate, 100).unwrap(),
            b"raw"
        );
        assert_eq!(
            inflate_whole(b"not gzip", Coding::Gzip, 100),
            Err(BadCoding)
        );
    }

    #[test]
    fn only_zero_padding_may_follow_the_data() {
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), Compression::default());
        zlib.write_all(b"zlib").unwrap();
        let zlib = zlib.finish().unwrap();
        let member = gzip(b"one");
        for (data, coding, want) in [
            (&member, Coding::Gzip, &b"one"[..]),
            (&zlib, Coding::Deflate, &b"zlib"[..]),
        ] {
            let padded = [&data[..], &[0u8; 9]].concat();
            assert_eq!(inflate_whole(&padded, coding, 100).unwrap(), want);
            for tail in [&b"junk"[..], b"\0\0x", b"\x1f", b"j"] {
                let bad = [&data[..], tail].concat();
                assert_eq!(inflate_whole(&bad, coding, 100), Err(BadCoding));
            }
            // a byte at a time: the padding, then a stray byte in a later piece
            let mut inflater = Inflater::new(coding);
            let mut out = Vec::new();
            for byte in padded.iter() {
                inflater.push(&[*byte]);
                while let Some(piece) = inflater.next().unwrap() {
                    out.extend_from_slice(&piece);
                }
            }
            out.extend_from_slice(&inflater.finish().unwrap());
            assert_eq!(out, want);
            inflater.push(b"x");
            assert_eq!(inflater.next(), Err(BadCoding));
        }
        // zeros between gzip members are no padding (gzip -d: "trailing garbage")
        let two = [&member[..], &[0u8; 2], &gzip(b"two")].concat();
        assert_eq!(inflate_whole(&two, Coding::Gzip, 100), Err(BadCoding));
    }
}
