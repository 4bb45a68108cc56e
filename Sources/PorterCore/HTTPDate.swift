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
    static let days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    static let longDays = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
    static let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]

    public static func parse(_ text: String) -> Date? {
        let t = text.trimmingCharacters(in: CharacterSet(charactersIn: " \t"))
        let b = Array(t.utf8)
        func num(_ r: Range<Int>) -> Int? {
            guard r.upperBound <= b.count, !r.isEmpty else { return nil }
            var n = 0
            for i in r {
                guard b[i] >= 0x30, b[i] <= 0x39 else { return nil }
                n = n * 10 + Int(b[i] - 0x30)
            }
            return n
        }
        /// The bytes in `r`, ASCII letters lowered (names and the zone match in any case).
        func word(_ r: Range<Int>) -> String? {
            guard r.lowerBound >= 0, r.upperBound <= b.count else { return nil }
            return String(decoding: b[r].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
        }
        func month(_ r: Range<Int>) -> Int? { word(r).flatMap { months.firstIndex(of: $0) }.map { $0 + 1 } }
        func time(_ at: Int) -> (Int, Int, Int)? {
            guard at + 8 <= b.count, b[at + 2] == 0x3A, b[at + 5] == 0x3A,
                  let h = num(at..<at + 2), let m = num(at + 3..<at + 5), let s = num(at + 6..<at + 8) else { return nil }
            return (h, m, s)
        }
        var day = 0, mon = 0, year = 0, hms = (0, 0, 0)
        if b.count == 29, b[3] == 0x2C, b[4] == 0x20, word(0..<3).map(days.contains) == true, word(25..<29) == " gmt" {
            // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
            guard let dd = num(5..<7), b[7] == 0x20, let m = month(8..<11), b[11] == 0x20,
                  let y = num(12..<16), b[16] == 0x20, let tm = time(17) else { return nil }
            (day, mon, year, hms) = (dd, m, y, tm)
        } else if b.count == 24, b[3] == 0x20, word(0..<3).map(days.contains) == true {
            // asctime: "Sun Nov  6 08:49:37 1994" (or "Sun Nov 06 ...")
            guard let m = month(4..<7), b[7] == 0x20 else { return nil }
            let dd = b[8] == 0x20 ? num(9..<10) : num(8..<10)
            guard let dd, b[10] == 0x20, let tm = time(11), b[19] == 0x20, let y = num(20..<24) else { return nil }
            (day, mon, year, hms) = (dd, m, y, tm)
        } else if let comma = b.firstIndex(of: 0x2C), word(0..<comma).map(longDays.contains) == true, b.count == comma + 24,
                  word(comma + 20..<comma + 24) == " gmt" {
            // rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT"; a two-digit year more than 50
            // years ahead is in the past century (RFC 9110 §5.6.7).
            let at = comma + 2
            guard b[comma + 1] == 0x20, let dd = num(at..<at + 2), b[at + 2] == 0x2D, let m = month(at + 3..<at + 6),
                  b[at + 6] == 0x2D, let yy = num(at + 7..<at + 9), b[at + 9] == 0x20, let tm = time(at + 10) else { return nil }
            let thisYear = Calendar(identifier: .gregorian).component(.year, from: Date())
            var y = (thisYear / 100) * 100 + yy
            if y > thisYear + 50 { y -= 100 }
            (day, mon, year, hms) = (dd, m, y, tm)
        } else {
            return nil
        }
        guard (1...31).contains(day), hms.0 < 24, hms.1 < 60, hms.2 < 61 else { return nil }
        var utc = Calendar(identifier: .gregorian)
        utc.timeZone = TimeZone(identifier: "GMT") ?? utc.timeZone
        let parts = DateComponents(year: year, month: mon, day: day, hour: hms.0, minute: hms.1, second: min(hms.2, 59))
        guard let date = utc.date(from: parts), utc.component(.day, from: date) == day else { return nil }
        return date
    }
}
