//! InfiniBand link rates: lane speeds (SDR … XDR) and widths (1x … 12x), as the kernel's
//! `rate` file, `ibnetdiscover` (`4xHDR`, `4x HDR` under `-p`) and an agent's
//! `[health] ibSpeed`/`ibWidth` write them. One vocabulary for the agent's port checks
//! and the fabric's link health, so both order speeds alike.

use std::fmt;

/// An InfiniBand lane speed, slowest first (the order compares them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IbSpeed {
    Sdr,
    Ddr,
    Qdr,
    Fdr10,
    Fdr,
    Edr,
    Hdr,
    Ndr,
    Xdr,
}

impl IbSpeed {
    const ALL: [IbSpeed; 9] = [
        IbSpeed::Sdr,
        IbSpeed::Ddr,
        IbSpeed::Qdr,
        IbSpeed::Fdr10,
        IbSpeed::Fdr,
        IbSpeed::Edr,
        IbSpeed::Hdr,
        IbSpeed::Ndr,
        IbSpeed::Xdr,
    ];

    /// `EDR`, as in `100 Gb/sec (4X EDR)`.
    pub fn name(self) -> &'static str {
        match self {
            IbSpeed::Sdr => "SDR",
            IbSpeed::Ddr => "DDR",
            IbSpeed::Qdr => "QDR",
            IbSpeed::Fdr10 => "FDR10",
            IbSpeed::Fdr => "FDR",
            IbSpeed::Edr => "EDR",
            IbSpeed::Hdr => "HDR",
            IbSpeed::Ndr => "NDR",
            IbSpeed::Xdr => "XDR",
        }
    }

    /// Gb/s of one lane, as the kernel counts it in `rate` (the rate over the width).
    pub fn lane_gbps(self) -> f64 {
        match self {
            IbSpeed::Sdr => 2.5,
            IbSpeed::Ddr => 5.0,
            IbSpeed::Qdr | IbSpeed::Fdr10 => 10.0,
            IbSpeed::Fdr => 14.0,
            IbSpeed::Edr => 25.0,
            IbSpeed::Hdr => 50.0,
            IbSpeed::Ndr => 100.0,
            IbSpeed::Xdr => 200.0,
        }
    }

    /// `EDR`, `edr`: the speed; anything else `None`.
    pub fn parse(text: &str) -> Option<IbSpeed> {
        Self::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(text.trim()))
    }
}

/// `4x`, `4X`, `12x`: lanes; the widths InfiniBand has only.
pub fn parse_width(text: &str) -> Option<u32> {
    let digits = text.trim().strip_suffix(['x', 'X'])?;
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|w| [1, 2, 4, 8, 12].contains(w))
}

/// A link's active width and lane speed: `4xHDR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IbRate {
    /// Lanes: 1, 2, 4, 8 or 12.
    pub width: u32,
    pub speed: IbSpeed,
}

impl IbRate {
    /// `4xHDR`, `4x HDR`, `12XQDR`; anything else (`???`, empty) `None`.
    pub fn parse(text: &str) -> Option<IbRate> {
        let t = text.trim();
        let x = t.find(['x', 'X'])?;
        let (w, s) = t.split_at(x + 1);
        Some(IbRate {
            width: parse_width(w)?,
            speed: IbSpeed::parse(s)?,
        })
    }

    /// Whether this rate falls short of `expected` in lanes or in lane speed.
    pub fn below(self, expected: IbRate) -> bool {
        self.width < expected.width || self.speed < expected.speed
    }
}

impl fmt::Display for IbRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width, self.speed.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_as_dumps_write_them() {
        assert_eq!(
            IbRate::parse("4xHDR"),
            Some(IbRate {
                width: 4,
                speed: IbSpeed::Hdr
            })
        );
        assert_eq!(IbRate::parse("4x EDR").map(|r| r.to_string()), Some("4xEDR".into()));
        assert_eq!(IbRate::parse("12XQDR").map(|r| r.width), Some(12));
        assert_eq!(IbRate::parse("4xFDR10").map(|r| r.speed), Some(IbSpeed::Fdr10));
        for bad in ["", "???", "4x", "xHDR", "3xHDR", "4xZDR", "999999999999xHDR", "4x ???"] {
            assert_eq!(IbRate::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn narrower_or_slower_is_below() {
        let hdr = IbRate::parse("4xHDR").unwrap_or_else(|| unreachable!());
        for (rate, below) in [
            ("1xHDR", true),
            ("4xEDR", true),
            ("4xHDR", false),
            ("4xNDR", false),
            ("2xNDR", true),
        ] {
            let r = IbRate::parse(rate).unwrap_or_else(|| unreachable!());
            assert_eq!(r.below(hdr), below, "{rate}");
        }
        assert!(IbSpeed::Fdr10 < IbSpeed::Fdr && IbSpeed::Sdr < IbSpeed::Xdr);
    }
}
