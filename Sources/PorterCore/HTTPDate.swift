import Foundation

/// RFC 9110 §5.6.7 HTTP-date, as a cache recipient reads it (RFC 9111 §4.2): the three
/// forms, IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), rfc850-date ("Sunday,
/// 06-Nov-94 08:49:37 GMT") and asctime ("Sun Nov  6 08:49:37 1994", the day padded with
/// a space, or two digits), with the names of days and months and the zone matched in
/// any case ("THU, 18 AUG 2050 02:01:18 gmt"), as RFC 9111 §4.2 asks of caches and as
/// browsers read them. The day name must be one (browsers, like RFC 9110, do not check
/// that it is that date's). Everything else is refused: another zone ("UTC", "PST"), a
/// two-digit year in IMF-fixdate, a missing comma, doubled spaces, dashes or dots where
/// they do not belong, a one-digit hour, an impossible day ("31 Feb"), anything after.
/// (Cookies use RFC 6265's far more lenient algorithm; a cache may not: an Expires that
/// is not an HTTP-date means "already expired".)
public enum HTTPDate {
    public static func parse(_ text: String) -> Date? {
        if let parsed = text.utf8.withContiguousStorageIfAvailable({ parse(bytes: $0) }) { return parsed }
        return Array(text.utf8).withUnsafeBufferPointer { parse(bytes: $0) }
    }

    /// Whether `b[at..<at+name.count]`, ASCII letters lowered, is `name` (lower case).
    private static func matches(_ b: UnsafeBufferPointer<UInt8>, _ at: Int, _ name: StaticString) -> Bool {
        guard at >= 0, at + name.utf8CodeUnitCount <= b.count else { return false }
        let n = name.utf8Start
        for i in 0..<name.utf8CodeUnitCount {
            let c = b[at + i]
            guard (c >= 0x41 && c <= 0x5A ? c | 0x20 : c) == n[i] else { return false }
        }
        return true
    }

    private static let dayNames: [StaticString] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    private static let longDayNames: [StaticString] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
    private static let monthNames: [StaticString] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    /// Byte by byte, with no String or Calendar on the way: a cache reads the Date (and
    /// Expires, Last-Modified) of every stored response it answers with.
    private static func parse(bytes all: UnsafeBufferPointer<UInt8>) -> Date? {
        // Space and tab trimmed (the only white space a field value may carry at its ends).
        var lo = 0, hi = all.count
        while lo < hi, all[lo] == 0x20 || all[lo] == 0x09 { lo += 1 }
        while hi > lo, all[hi - 1] == 0x20 || all[hi - 1] == 0x09 { hi -= 1 }
        let b = UnsafeBufferPointer(rebasing: all[lo..<hi])
        func num(_ r: Range<Int>) -> Int? {
            guard r.upperBound <= b.count, !r.isEmpty else { return nil }
            var n = 0
            for i in r {
                guard b[i] >= 0x30, b[i] <= 0x39 else { return nil }
                n = n * 10 + Int(b[i] - 0x30)
            }
            return n
        }
        func isDay(_ r: Range<Int>, _ names: [StaticString]) -> Bool {
            names.contains { $0.utf8CodeUnitCount == r.count && matches(b, r.lowerBound, $0) }
        }
        func month(_ at: Int) -> Int? { monthNames.firstIndex { matches(b, at, $0) }.map { $0 + 1 } }
        func time(_ at: Int) -> (Int, Int, Int)? {
            guard at + 8 <= b.count, b[at + 2] == 0x3A, b[at + 5] == 0x3A,
                  let h = num(at..<at + 2), let m = num(at + 3..<at + 5), let s = num(at + 6..<at + 8) else { return nil }
            return (h, m, s)
        }
        var day = 0, mon = 0, year = 0, hms = (0, 0, 0)
        if b.count == 29, b[3] == 0x2C, b[4] == 0x20, isDay(0..<3, dayNames), matches(b, 25, " gmt") {
            // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
            guard let dd = num(5..<7), b[7] == 0x20, let m = month(8), b[11] == 0x20,
                  let y = num(12..<16), b[16] == 0x20, let tm = time(17) else { return nil }
            (day, mon, year, hms) = (dd, m, y, tm)
        } else if b.count == 24, b[3] == 0x20, isDay(0..<3, dayNames) {
            // asctime: "Sun Nov  6 08:49:37 1994" (or "Sun Nov 06 ...")
            guard let m = month(4), b[7] == 0x20 else { return nil }
            let dd = b[8] == 0x20 ? num(9..<10) : num(8..<10)
            guard let dd, b[10] == 0x20, let tm = time(11), b[19] == 0x20, let y = num(20..<24) else { return nil }
            (day, mon, year, hms) = (dd, m, y, tm)
        } else if let comma = b.firstIndex(of: 0x2C), isDay(0..<comma, longDayNames), b.count == comma + 24,
                  matches(b, comma + 20, " gmt") {
            // rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT"; a two-digit year more than 50
            // years ahead is in the past century (RFC 9110 §5.6.7).
            let at = comma + 2
            guard b[comma + 1] == 0x20, let dd = num(at..<at + 2), b[at + 2] == 0x2D, let m = month(at + 3),
                  b[at + 6] == 0x2D, let yy = num(at + 7..<at + 9), b[at + 9] == 0x20, let tm = time(at + 10) else { return nil }
            let thisYear = Calendar(identifier: .gregorian).component(.year, from: Date())
            var y = (thisYear / 100) * 100 + yy
            if y > thisYear + 50 { y -= 100 }
            (day, mon, year, hms) = (dd, m, y, tm)
        } else {
            return nil
        }
        guard (1...31).contains(day), hms.0 < 24, hms.1 < 60, hms.2 < 61 else { return nil }
        return date(year: year, month: mon, day: day, hour: hms.0, minute: hms.1, second: min(hms.2, 59))
    }

    /// The instant of a UTC date and time, nil for a day the month does not have.
    /// Arithmetic on the proleptic Gregorian calendar (days from 1970-01-01) where it and
    /// Foundation's Gregorian calendar agree (from 1583, after the Julian cut-over); the
    /// calendar itself for earlier years.
    private static let monthLengths = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]

    static func date(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Date? {
        guard year >= 1583 else { return calendarDate(year: year, month: month, day: day, hour: hour, minute: minute, second: second) }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        guard (1...12).contains(month), day >= 1, day <= (month == 2 && leap ? 29 : monthLengths[month - 1]) else { return nil }
        // Days from civil (H. Hinnant's algorithm): years start in March, so the leap day is last.
        let y = month <= 2 ? year - 1 : year
        let era = y / 400   // y >= 1582 here: no negative division
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        let days = era * 146_097 + doe - 719_468
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3_600 + minute * 60 + second))
    }

    /// The same through Foundation's Gregorian calendar in GMT (a day the month lacks
    /// rolls over, so it is nil).
    static func calendarDate(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Date? {
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = TimeZone(identifier: "GMT") ?? utc.timeZone
        let parts = DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        guard let date = utc.date(from: parts), utc.component(.day, from: date) == day else { return nil }
        return date
    }
}
