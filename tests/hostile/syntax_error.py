"""Does not parse."""

def attend(cache, query)
    return query
