"""Turning file bytes into text: BOMs, UTF-8, charset detection, binary rejection.

Order: a byte-order mark wins (UTF-8/16/32); otherwise NUL bytes mean binary (more than a
few stray ones: those are left to the loader, whose record holding them fails alone);
otherwise strict UTF-8; otherwise charset-normalizer's detection. Among the
candidates charset-normalizer finds about equally plausible, a Western European
code page (cp1252 / ISO-8859-1 / ISO-8859-15, the ELOG default) is preferred, since
charset-normalizer cannot tell Latin-1 from Latin-2 on short texts. cp1252 and
ISO-8859-1 decode every byte outside 0x80-0x9F alike, so a file without such bytes is
reported as ISO-8859-1 (``latin_1``), the standard one; cp1252 only when it has them.
Bytes are never dropped: if no encoding decodes the file it is rejected as binary.
"""

from __future__ import annotations

import codecs
import logging
import re
from dataclasses import dataclass

from charset_normalizer import from_bytes

from ingestion.errors import BinaryFileError

log = logging.getLogger(__name__)

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf_32"),
    (codecs.BOM_UTF32_BE, "utf_32"),
    (codecs.BOM_UTF8, "utf_8_sig"),
    (codecs.BOM_UTF16_LE, "utf_16"),
    (codecs.BOM_UTF16_BE, "utf_16"),
)

#: Preferred legacy encodings, in order, when detection is ambiguous.
PREFERRED_LEGACY: tuple[str, ...] = ("cp1252", "latin_1", "iso8859_15")
_CHAOS_TOLERANCE = 0.02
#: NUL bytes a text file may hold (per cent of its first 64 KiB) and still be text: a damaged
#: entry (a crashed writer's padding) then fails alone, in its loader; binaries hold far more.
MAX_STRAY_NUL_PERCENT = 1
#: A run of NUL bytes this long is a zeroed block (a crash's leftover), not binary content.
_ZERO_BLOCK = re.compile(rb"\x00{512,}")


@dataclass(frozen=True)
class DecodedText:
    """Decoded file content and the encoding (Python codec name) that produced it."""

    text: str
    encoding: str


def decode_bytes(data: bytes, *, name: str = "<bytes>") -> DecodedText:
    """Decode ``data`` to text without losing bytes.

    Args:
        data: raw file content.
        name: used in error messages only.
    Returns:
        The text (line endings untouched) and the codec used.
    Raises:
        BinaryFileError: NUL bytes (over :data:`MAX_STRAY_NUL_PERCENT` of the first 64 KiB, zeroed
            blocks of 512+ not counted) without a UTF-16/32 BOM, or no encoding fits.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return DecodedText(data.decode(codec), codec)
            except UnicodeDecodeError as exc:
                raise BinaryFileError(f"{name}: has a {codec} byte-order mark but does not decode: {exc}") from exc
    sample = data[:65536]
    if _ZERO_BLOCK.sub(b"", sample).count(0) * 100 > len(sample) * MAX_STRAY_NUL_PERCENT:
        raise BinaryFileError(f"{name}: binary file (contains NUL bytes)")
    try:
        return DecodedText(data.decode("utf_8"), "utf_8")
    except UnicodeDecodeError:
        pass
    matches = list(from_bytes(data))
    if not matches:
        raise BinaryFileError(f"{name}: binary file (no text encoding fits its bytes)")
    best = matches[0]
    chosen = best
    for match in matches:
        if match.chaos > best.chaos + _CHAOS_TOLERANCE:
            continue
        candidates = {match.encoding, *match.could_be_from_charset}
        if any(enc in candidates for enc in PREFERRED_LEGACY):
            chosen = match
            break
    encoding = chosen.encoding
    for enc in PREFERRED_LEGACY:
        if enc in {chosen.encoding, *chosen.could_be_from_charset}:
            encoding = enc
            break
    if encoding == "cp1252" and not any(0x80 <= b <= 0x9F for b in data):
        encoding = "latin_1"  # the same text; ISO-8859-1 is what such a file is
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        encoding = chosen.encoding
        text = str(chosen)
    log.debug("%s: decoded as %s (detected)", name, encoding)
    return DecodedText(text, encoding)
